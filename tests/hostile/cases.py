"""Hostile HTTP requests, generated systematically: input classes x route families x payloads.

Pure generation (no I/O): `http_cases(world)` yields `Case`s that tests/hostile/test_hostile.py sends to a real
`recovery serve`. Each case says which caller sends it and what counts as a right answer beyond the invariants
every case shares (no 5xx, no SQL, no traceback, no token text).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

INT64_PLUS_1 = str(2**63)
HUGE = "9" * 40
NUMBERS = [
    "0",
    "-1",
    "1.5",
    "1e309",
    "NaN",
    "²",
    "١٢٣",
    "１２",
    " 12",
    "0x10",
    INT64_PLUS_1,
    str(2**64),
    HUGE,
    "12%00",
    "",
]
TIMES = [
    "9999-12-31T23:59:59-05:00",
    "0001-01-01T00:00:00+05:00",
    "9999-12-31T23:59:59Z",
    "2025-13-45T99:99:99Z",
    "2025-01-01T00:00:00",
    "99999999999999999999",
    "-999999999999999999",
    "10000-01-01T00:00:00Z",
    "²",
    "now",
]
TEXTS = [
    "%" * 300,
    "_" * 201,
    "x" * 5000,
    "'; DROP TABLE workflows; --",
    "\\",
    "<script>alert(1)</script>",
    "é" * 201,
    "\U0001f600" * 100,
]


@dataclass(frozen=True)
class Case:
    """One request: `who` is anonymous, viewer, operator, norole, session (dashboard cookie) or a forged token."""

    klass: str
    method: str
    path: str
    who: str = "viewer"
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None
    # Statuses that are right for this case (besides: never 5xx); empty means any 4xx/2xx/3xx.
    expect: tuple[int, ...] = ()
    protected: bool = True

    @property
    def label(self) -> str:
        return f"[{self.klass}] {self.who} {self.method} {self.path[:120]}"


@dataclass
class World:
    """What the generator may refer to: seeded ids, real cursors of each listing, forged tokens by name."""

    job_id: int
    attempt_index: int
    workflow_id: int
    advice_id: int
    attempt_uuid: str
    rest_cursors: dict[str, str]  # REST path -> a real nextPageToken
    graphql_cursor: str
    forged: dict[str, str]  # name -> forged token text


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forged_tokens(kid: str) -> dict[str, str]:
    """Tokens whose JOSE header carries text no header may echo (non-Latin-1, CR/LF), and other forgeries."""
    claims = b64url(json.dumps({"sub": "x", "roles": ["operator"], "exp": 4102444800}).encode())
    sig = b64url(b"\x00" * 32)

    def token(header: Any) -> str:
        raw = header if isinstance(header, bytes) else json.dumps(header, ensure_ascii=False).encode()
        return f"{b64url(raw)}.{claims}.{sig}"

    return {
        "alg-non-latin1": token({"alg": "RS256☃", "typ": "JWT", "kid": kid}),
        "alg-crlf": token({"alg": "RS256\r\nX-Injected: 1", "typ": "JWT"}),
        "kid-non-latin1": token({"alg": "RS256", "typ": "JWT", "kid": "ключ\u2028"}),
        "kid-crlf": token({"alg": "RS256", "typ": "JWT", "kid": "a\r\nSet-Cookie: x=1"}),
        "kid-quote": token({"alg": "RS256", "typ": "JWT", "kid": 'a", error="x'}),
        "typ-non-latin1": token({"alg": "RS256", "typ": "ЖWT", "kid": kid}),
        "typ-crlf": token({"alg": "RS256", "typ": "JWT\r\n", "kid": kid}),
        "alg-none": token({"alg": "none", "typ": "JWT"}),
        "alg-hs256": token({"alg": "HS256", "typ": "JWT", "kid": kid}),
        "alg-list": token({"alg": ["RS256"], "kid": kid}),
        "header-array": token([1, 2, 3]),
        "header-not-json": token(b"\xff\xfe not json"),
        "header-deep": token(b"[" * 5000 + b"]" * 5000),
        "kid-huge": token({"alg": "RS256", "kid": "k" * 6000}),
        "signed-garbage": f"{b64url(json.dumps({'alg': 'RS256', 'kid': kid}).encode())}.{claims}.{sig}",
    }


# ---- routes ----------------------------------------------------------------------------------------

GRAPHQL_VIEWER = '{"query":"{ viewer { name roles } }"}'


def rest_routes(w: World) -> list[str]:
    return [
        f"/v1/jobs/by-scheduler-id/{w.job_id}",
        "/v1/advice",
        "/v1/workflows",
        "/v1/audit/events",
    ]


def dashboard_pages(w: World) -> list[str]:
    return [
        "/dashboard/",
        "/dashboard/workflow",
        f"/dashboard/workflow/{w.workflow_id}",
        f"/dashboard/jobs/{w.job_id}",
        f"/dashboard/jobs/{w.job_id}/attempts/{w.attempt_index}",
        f"/dashboard/jobs/{w.job_id}/attempts/{w.attempt_index}/timeline",
        f"/dashboard/attempts/{w.attempt_uuid}",
        f"/dashboard/attempts/{w.attempt_uuid}/timeline",
        "/dashboard/audit",
        "/dashboard/advice",
    ]


def _json_post(path: str, body: str | bytes, **kw: Any) -> dict[str, Any]:
    raw = body.encode() if isinstance(body, str) else body
    return {"method": "POST", "path": path, "body": raw, "headers": {"Content-Type": "application/json"}, **kw}


# ---- the classes ------------------------------------------------------------------------------------


def forged_token_cases(w: World) -> Iterator[Case]:
    """Class 1: forged JOSE headers on every protected route family."""
    for name in w.forged:
        for path in rest_routes(w) + dashboard_pages(w)[1:4] + ["/dashboard/live?view=overview"]:
            yield Case("1-forged-token", "GET", path, who=f"forged:{name}", expect=(401,))
        yield Case("1-forged-token", **_json_post("/graphql", GRAPHQL_VIEWER), who=f"forged:{name}", expect=(401,))
        yield Case(
            "1-forged-token",
            "GET",
            "/v1/workflows?access_token=" + quote(w.forged[name], safe=""),
            who="anonymous",
            expect=(401, 414),
        )


def origin_cases(w: World) -> Iterator[Case]:
    """Class 2: state-changing requests from another site (the server runs with OIDC; dev-mode Host is separate)."""
    mutation = json.dumps({"query": 'mutation { approveAdvice(id: "x") { id } }'})
    for origin in ("http://evil.example", "null", "http://127.0.0.1.evil.example", "https://127.0.0.1"):
        for who in ("operator", "session"):
            yield Case(
                "2-origin",
                "POST",
                "/graphql",
                who=who,
                headers={"Content-Type": "application/json", "Origin": origin},
                body=mutation.encode(),
                # a bearer caller from origin "null" has no ambient credentials to abuse: its answer is its own
                expect=(401, 403) if who == "session" else () if origin == "null" else (403,),
            )
            for action in ("approve", "veto", "rerun"):
                yield Case(
                    "2-origin",
                    "POST",
                    f"/dashboard/advice/{w.advice_id}/{action}",
                    who=who,
                    headers={"Origin": origin, "Content-Type": "application/x-www-form-urlencoded"},
                    body=b"csrf_token=whatever&reason=x",
                    expect=() if who == "operator" and origin == "null" else (403,),
                )
        yield Case(
            "2-origin",
            "POST",
            "/dashboard/auth/logout",
            who="session",
            headers={"Origin": origin, "Content-Type": "application/x-www-form-urlencoded"},
            body=b"csrf_token=x",
            expect=(403,),
            protected=False,
        )
    for referer in ("http://evil.example/page", "not a url"):
        yield Case(
            "2-origin",
            "POST",
            f"/dashboard/advice/{w.advice_id}/approve",
            who="session",
            headers={"Referer": referer},
            expect=(403,),
        )
    # cookies without Origin/Referer: not what a browser sends
    yield Case("2-origin", "POST", f"/dashboard/advice/{w.advice_id}/approve", who="session", expect=(403,))


def graphql_internal_cases(w: World) -> Iterator[Case]:
    """Class 3: inputs that used to reach the database and come back as SQL text."""
    huge_ids = [b64url(f"{t}:{n}".encode()) for t in ("Workflow", "Job", "Attempt", "Advice") for n in (HUGE, 2**63)]
    for gid in huge_ids:
        for who in ("viewer", "operator"):
            q = json.dumps({"query": "query($id: ID!) { node(id: $id) { id } }", "variables": {"id": gid}})
            yield Case("3-graphql-internal", **_json_post("/graphql", q), who=who, expect=(200,))
    gid = b64url(f"Advice:{2**63}".encode())
    for mutation in ("approveAdvice", "rerunReconciliation", "decideAdviceAgain"):
        q = json.dumps({"query": f'mutation {{ {mutation}(id: "{gid}") {{ id }} }}'})
        yield Case("3-graphql-internal", **_json_post("/graphql", q), who="operator", expect=(200,))


def number_cases(w: World) -> Iterator[Case]:
    """Class 4: ids beyond int64, non-ASCII digits, far-away times, cursors carrying huge ids."""
    for value in NUMBERS:
        v = quote(value, safe="")
        yield Case("4-numbers", "GET", f"/v1/jobs/by-scheduler-id/{v}", expect=(400, 404))
        for name in ("jobId", "attemptIndex", "limit"):
            yield Case("4-numbers", "GET", f"/v1/audit/events?jobId=1&{name}={v}")
        yield Case("4-numbers", "GET", f"/v1/workflows?limit={v}")
        for page in (
            f"/dashboard/jobs/{v}",
            f"/dashboard/workflow/{v}",
            f"/dashboard/jobs/{w.job_id}/attempts/{v}",
            f"/dashboard/jobs/{v}/attempts/0/timeline",
            f"/dashboard/live?view=workflow&workflow={v}",
            f"/dashboard/live?view=attempt&job={v}",
            f"/dashboard/audit?job={v}",
        ):
            yield Case("4-numbers", "GET", page)
            yield Case("4-numbers", "GET", page, headers={"HX-Request": "true"})  # the fragment
        yield Case(
            "4-numbers",
            "POST",
            f"/dashboard/advice/{v}/approve",
            who="operator",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
            body=b"",
        )
        if value and value == value.strip():  # (HTTP cannot carry a header value with edge spaces)
            valid = value.isascii() and value.isdigit() and int(value) < 2**63
            yield Case(
                "4-numbers",
                "GET",
                "/dashboard/live?view=overview",
                headers={"Last-Event-ID": value},
                expect=(200,) if valid else (400,),
            )
    for bits in (31, 32, 53, 63, 64, 100):
        q = json.dumps({"query": "query($j: Int!) { job(jobId: $j) { id } }", "variables": {"j": 2**bits}})
        yield Case("4-numbers", **_json_post("/graphql", q))
        q = json.dumps({"query": f"{{ job(jobId: {2**bits}) {{ id }} }}"})
        yield Case("4-numbers", **_json_post("/graphql", q))
    for value in TIMES:
        v = quote(value, safe="")
        for name in ("producedAfter", "producedBefore"):
            yield Case("4-numbers", "GET", f"/v1/audit/events?{name}={v}")
        yield Case("4-numbers", "GET", f"/dashboard/audit?from={v}")
        yield Case("4-numbers", "GET", f"/dashboard/audit?to={v}")
        q = json.dumps(
            {
                "query": "query($t: DateTime) { auditEvents(filter: {producedAfter: $t}) { nodes { id } } }",
                "variables": {"t": value},
            }
        )
        yield Case("4-numbers", **_json_post("/graphql", q))
    for cursor in evil_cursors(w):
        c = quote(cursor, safe="")
        for path in rest_routes(w):
            yield Case("4-cursors", "GET", f"{path}?pageToken={c}")
        for page in (
            "/dashboard/workflow",
            "/dashboard/advice",
            "/dashboard/audit",
            f"/dashboard/workflow/{w.workflow_id}",
        ):
            yield Case("4-cursors", "GET", f"{page}?after={c}")
            yield Case("4-cursors", "GET", f"{page}?before={c}")
            yield Case("4-cursors", "GET", f"{page}?after={c}", headers={"HX-Request": "true"})
        for field_name in ("workflows", "attempts", "advice", "auditEvents"):
            q = json.dumps(
                {
                    "query": f"query($c: String) {{ {field_name}(after: $c) {{ nodes {{ id }} }} }}",
                    "variables": {"c": cursor},
                }
            )
            yield Case("4-cursors", **_json_post("/graphql", q))
    for after in NUMBERS[:-1]:
        q = json.dumps({"query": f"subscription {{ auditEvents(after: {json.dumps(after)}) {{ position }} }}"})
        yield Case("4-numbers", **_json_post("/graphql", q))


def evil_cursors(w: World) -> list[str]:
    """Real cursors with their values replaced: huge ints, far times, wrong kinds, damaged text."""
    out: list[str] = []
    reals = list(w.rest_cursors.values()) + [w.graphql_cursor]
    for real in reals:
        raw = base64.urlsafe_b64decode(real + "=" * (-len(real) % 4)).decode()
        prefix, payload = raw[:3], json.loads(raw[3:])
        kind, values = payload
        variants = [
            [int(HUGE) if isinstance(v, int) else v for v in values],
            [2**63 if isinstance(v, int) else v for v in values],
            [{"t": "9999-12-31T23:59:59-05:00"} if isinstance(v, dict) else v for v in values],
            [{"t": "0001-01-01T00:00:00+05:00"} if isinstance(v, dict) else v for v in values],
            [{"t": "not a time"} if isinstance(v, dict) else v for v in values],
            ["x" * 400 for _ in values],
            [None for _ in values],
            values + [1],
        ]
        for variant in variants:
            out.append(b64url((prefix + json.dumps([kind, variant])).encode()))
    out += [real[:-3] for real in reals[:2]] + ["k1:" + "A" * 600, "%%%", "////", b64url(b"k1:[1,2]")]
    return out


def search_cases(w: World) -> Iterator[Case]:
    """Class 5: search and filter text without a cap."""
    for text in TEXTS + ["%" * 60000]:
        q = json.dumps(
            {
                "query": "query($s: String) { workflows(filter: {search: $s}) { nodes { id } } }",
                "variables": {"s": text},
            }
        )
        yield Case("5-search", **_json_post("/graphql", q))
        if len(text) < 6000:
            v = quote(text, safe="")
            yield Case("5-search", "GET", f"/v1/workflows?search={v}")
            yield Case("5-search", "GET", f"/v1/workflows?cluster={v}&state={v}&environment={v}")
            yield Case("5-search", "GET", f"/dashboard/workflow?q={v}")
            yield Case("5-search", "GET", f"/dashboard/workflow?q={v}&cluster={v}", headers={"HX-Request": "true"})
            yield Case("5-search", "GET", f"/v1/audit/events?component={v}&eventType={v}&cluster={v}")
        else:
            yield Case("5-search", "GET", "/v1/workflows?search=" + "%25" * 5000, expect=(414,))


def json_body_cases(w: World) -> Iterator[Case]:
    """Class 6: JSON bodies that are not (safe) JSON."""
    bodies: list[bytes] = [
        b"[" * 100000 + b"]" * 100000,
        b'{"query":' * 5000 + b'"x"' + b"}" * 5000,
        b'{"query": "\xff\xfe"}',
        b"\xef\xbb\xbf" + GRAPHQL_VIEWER.encode(),
        b'{"query": "{ viewer { name } }", "variables": {"a": "\\ud800"}}',
        b'{"query": "{ viewer { name } }\\u0000"}',
        b'{"query": "{ viewer { name',
        b"",
        b"null",
        b"[]",
        b'"just a string"',
        b'{"query": 12}',
        b'{"query": "{ viewer { name } }", "variables": [1]}',
        b'{"query": "{ viewer { name } }", "operationName": {"x": 1}}',
        b'{"query": "{ viewer { name } }", "extensions": "x"}',
        b"x" * (1024 * 1024 + 10),
        b'{"query": "' + b"a" * 200000 + b'"}',
        b"1e999999",
    ]
    for body in bodies:
        for who in ("viewer", "anonymous"):
            yield Case(
                "6-json",
                "POST",
                "/graphql",
                who=who,
                headers={"Content-Type": "application/json"},
                body=body,
                expect=(400, 401, 413, 200) if who == "viewer" else (400, 401, 413),
            )
    for content_type in (
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/graphql",
    ):
        yield Case("6-json", "POST", "/graphql", headers={"Content-Type": content_type}, body=b"\xff\x00{")
    for content_type, body in (
        ("multipart/form-data; boundary=x", b'--x\r\nContent-Disposition: form-data; name="csrf_token"\r\n\r\n\xff'),
        ("multipart/form-data", b"no boundary at all"),
        ("multipart/form-data; boundary=" + "b" * 2000, b"--"),
        ("application/x-www-form-urlencoded", b"&".join(b"f%d=1" % n for n in range(5000))),
    ):
        for path in (f"/dashboard/advice/{w.advice_id}/veto", "/dashboard/auth/logout"):
            yield Case(
                "6-json",
                "POST",
                path,
                who="session",
                headers={"Content-Type": content_type, "Origin": "{self}"},
                body=body,
                protected=path != "/dashboard/auth/logout",
            )
    for body in (b"csrf_token=\xff\xfe&reason=\xc3", b"reason=" + b"%ff" * 100, b"a=" * 10000):
        yield Case(
            "6-json",
            "POST",
            f"/dashboard/advice/{w.advice_id}/veto",
            who="operator",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
            body=body,
        )


def signout_cases(w: World) -> Iterator[Case]:
    """Class 7: sign-out by GET, without CSRF (the copied-cookie check runs in the test itself)."""
    yield Case("7-signout", "GET", "/dashboard/auth/logout", who="session", expect=(405,), protected=False)
    yield Case("7-signout", "GET", "/dashboard/auth/logout", who="anonymous", expect=(405,), protected=False)
    yield Case(
        "7-signout",
        "POST",
        "/dashboard/auth/logout",
        who="session",
        headers={"Origin": "{self}", "Content-Type": "application/x-www-form-urlencoded"},
        body=b"csrf_token=wrong",
        expect=(403,),
        protected=False,
    )
    yield Case(
        "7-signout",
        "POST",
        "/dashboard/auth/logout",
        who="session",
        headers={"Origin": "{self}"},
        expect=(403,),
        protected=False,
    )


def graphql_document_cases(w: World) -> Iterator[Case]:
    """Class 10: documents graphql-core must refuse with its own messages."""
    documents = [
        "query { ...F }",
        "{ viewer { name } } { viewer { subject } }",
        "query A { viewer { name } } query A { viewer { name } }",
        "{ viewer { ...F } } fragment F on Viewer { ...G } fragment G on Viewer { ...F }",
        "{ nosuchfield }",
        "{ viewer { name(arg: 1) } }",
        "{ workflows(first: -1) { nodes { id } } }",
        "{ workflows(first: 100000) { nodes { id } } }",
        "{ workflows(first: 1, last: 1) { nodes { id } } }",
        "{ " + " ".join(f"a{i}: viewer {{ name }}" for i in range(100)) + " }",
        "{ workflows { nodes { jobs { nodes { attempts { nodes { id } } } } } } }",
        "{ __schema { types { fields { type { ofType { ofType { ofType { ofType { ofType { name } } } } } } } } } }",
        "{" * 500 + "}" * 500,
        "query ($a: Int) { viewer { name } }",
        "query { viewer { name } ",
        "subscription { auditEvents { position } }",
        "mutation { approveAdvice(id: 1) { id } }",
        '{ node(id: "") { id } }',
        '{ node(id: "' + "A" * 1000 + '") { id } }',
        '{ attempt(ref: "' + "9" * 50 + '-0") { id } }',
        '{ attempt(ref: "١٢٣-0") { id } }',
        '{ workflow(key: "' + "k" * 5000 + '") { id } }',
        '{ workflow(id: "V29ya2Zsb3c6MQ", key: "x") { id } }',
        "{ viewer { name } @skip(if: true) @skip(if: true) }",
        'query { viewer { name } } mutation { approveAdvice(id: "x") { id } }',
    ]
    for document in documents:
        for operation_name in (None, "A", "nosuch"):
            body: dict[str, Any] = {"query": document}
            if operation_name:
                body["operationName"] = operation_name
            yield Case("10-graphql-documents", **_json_post("/graphql", json.dumps(body)), who="operator")
        yield Case("10-graphql-documents", "GET", "/graphql?query=" + quote(document, safe=""))


def log_secret_cases(w: World) -> Iterator[Case]:
    """Class 11: tokens in query strings (the log is checked after the run)."""
    for path in ["/v1/workflows", "/dashboard/workflow", "/graphql", "/static/dashboard.css", "/healthz"]:
        for name in ("access_token", "token", "id_token", "code", "state"):
            yield Case("11-log-secrets", "GET", f"{path}?{name}={{viewer_token}}", who="anonymous", protected=False)


def anonymous_cases(w: World) -> Iterator[Case]:
    """Authentication is never bypassed: every protected route, every way of asking, without credentials."""
    for path in dashboard_pages(w) + ["/dashboard/live?view=overview", "/dashboard/live?view=advice"]:
        yield Case("auth", "GET", path, who="anonymous", expect=(303, 401))
        yield Case("auth", "GET", path, who="anonymous", headers={"HX-Request": "true"}, expect=(401,))
        yield Case("auth", "GET", path, who="anonymous", headers={"Accept": "text/event-stream"}, expect=(401,))
        yield Case("auth", "HEAD", path, who="anonymous", expect=(303, 401, 405))
        yield Case("auth", "GET", path, who="norole", expect=(403,))
        yield Case("auth", "GET", path, who="anonymous", headers={"Authorization": "Bearer"}, expect=(401,))
        yield Case("auth", "GET", path, who="anonymous", headers={"Authorization": "Basic YTpi"}, expect=(401,))
        yield Case(
            "auth",
            "GET",
            path,
            who="anonymous",
            headers={"Cookie": "recovery_dashboard=forged.value.sig"},
            expect=(303, 401),
        )
    for path in rest_routes(w):
        for headers in ({}, {"Authorization": "Bearer"}, {"Authorization": "Bearer a b"}, {"Authorization": "Token x"}):
            yield Case("auth", "GET", path, who="anonymous", headers=headers, expect=(401,))
        yield Case("auth", "GET", path, who="norole", expect=(403,))
    for action in ("approve", "veto", "rerun"):
        yield Case("auth", "POST", f"/dashboard/advice/{w.advice_id}/{action}", who="anonymous", expect=(401,))
        yield Case("auth", "POST", f"/dashboard/advice/{w.advice_id}/{action}", who="viewer", expect=(403,))
    yield Case("auth", **_json_post("/graphql", GRAPHQL_VIEWER), who="anonymous", expect=(401,))
    yield Case("auth", **_json_post("/graphql", GRAPHQL_VIEWER), who="norole", expect=(403,))
    yield Case("auth", "GET", "/graphql?query=" + quote("{ viewer { name } }"), who="anonymous", expect=(401,))
    q = json.dumps({"query": 'mutation { approveAdvice(id: "QWR2aWNlOjE") { id } }'})
    yield Case("auth", **_json_post("/graphql", q), who="viewer", expect=(403,))


def url_cases(w: World) -> Iterator[Case]:
    """URLs that are not text, static paths that escape, methods no route has, login and callback abuse."""
    for junk in ("%00", "%ff%fe", "%c3", "%ed%a0%80", "a%0d%0aX-Injected:%201"):
        for path in ("/v1/workflows?cluster=", "/dashboard/workflow?q=", "/graphql?query=", "/dashboard/audit?job="):
            yield Case("url", "GET", path + junk, expect=(400, 401, 200))
        yield Case("url", "GET", f"/dashboard/attempts/{junk}", expect=(400, 404))
        yield Case("url", "GET", f"/static/{junk}", expect=(400, 404), protected=False)
    for path in (
        "/static/../app/config.py",
        "/static/%2e%2e/%2e%2e/etc/passwd",
        "/static/..%2f..%2fetc%2fpasswd",
        "/static/" + "a" * 5000,
        "/static/dashboard.css%00.js",
        "/static//etc/passwd",
        "/static/.",
        "/static/",
    ):
        yield Case("static", "GET", path, expect=(307, 400, 404, 405, 414), protected=False)
    yield Case("static", "GET", "/static/dashboard.css", who="anonymous", expect=(200,), protected=False)
    for method in ("PUT", "DELETE", "PATCH", "TRACE", "PROPFIND"):
        for path in (
            "/v1/workflows",
            "/graphql",
            "/dashboard/workflow",
            "/dashboard/auth/logout",
            "/static/dashboard.css",
        ):
            yield Case("methods", method, path, expect=(400, 401, 403, 404, 405), protected=False)
    for nxt in (
        "//evil.example",
        "https://evil.example",
        "/\\evil.example",
        "javascript:alert(1)",
        "%2F%2Fevil",
        "\r\nLocation: x",
    ):
        yield Case(
            "login", "GET", "/dashboard/auth/login?next=" + quote(nxt, safe=""), who="anonymous", protected=False
        )
    for query in (
        "code=abc&state=forged",
        "error=access_denied&error_description=" + quote("<script>x</script>\r\n"),
        "error=" + "x" * 5000,
        "code=" + "%ff" * 10,
        "state=" + HUGE,
        "",
    ):
        yield Case(
            "callback", "GET", f"/dashboard/auth/callback?{query}", who="anonymous", expect=(400, 403), protected=False
        )
    yield Case("openapi", "GET", "/v1/openapi.json", who="anonymous", expect=(200,), protected=False)


def http_cases(w: World) -> list[Case]:
    """Every hostile HTTP case, in a fixed order."""
    generators = [
        forged_token_cases,
        origin_cases,
        graphql_internal_cases,
        number_cases,
        search_cases,
        json_body_cases,
        signout_cases,
        graphql_document_cases,
        log_secret_cases,
        anonymous_cases,
        url_cases,
    ]
    return [case for generate in generators for case in generate(w)]
