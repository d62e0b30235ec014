"""The bad-input suite: ~2000 hostile requests (classes x routes x payloads) to a real `recovery serve` authenticated
through the real OIDC provider, over HTTP and WebSocket, on SQLite and PostgreSQL.

Every answer must be: not a 5xx; free of SQL, tracebacks and token text (body and headers); for protected routes
without valid credentials never a success. Cases may name the exact statuses they expect. Afterwards the server's
log must hold no unexpected error and no token.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect
from websockets.typing import Subprotocol

from tests.hostile.cases import NUMBERS, Case, World, http_cases
from tests.hostile.helpers import INVALID_UTF8, Target, make_world

pytestmark = [pytest.mark.oidc, pytest.mark.slow]

MIN_REQUESTS = 800
DEADLINE_SECONDS = 600  # a bound, not a timing assertion: the suite stops sending after this
LEAKS = re.compile(
    r"Traceback \(most recent|\[SQL: |sqlalchemy\.|asyncpg\.|sqlite3\.|psycopg|OperationalError|IntegrityError"
    r"|ProgrammingError|DataError|SELECT [a-z_]+\.|File \"/",
)
PROTOCOL = Subprotocol("graphql-transport-ws")


@dataclass
class Outcome:
    case: str
    status: int
    problem: str | None


def _secrets(target: Target, world: World) -> list[str]:
    """Texts that must never come back: every real and forged token, and each part of a real token."""
    texts = list(target.tokens.values()) + list(world.forged.values())
    for token in target.tokens.values():
        texts += [part for part in token.split(".") if len(part) > 16]
    return texts


def _send(client: httpx.Client, target: Target, world: World, case: Case) -> tuple[int, dict[str, str], str]:
    headers = {k: v.replace("{self}", target.origin) for k, v in case.headers.items()}
    if case.who in target.tokens:
        headers.setdefault("Authorization", f"Bearer {target.tokens[case.who]}")
    elif case.who.startswith("forged:"):
        headers["Authorization"] = f"Bearer {world.forged[case.who.split(':', 1)[1]]}"
    elif case.who == "session":
        headers.setdefault("Cookie", f"recovery_dashboard={target.session_cookie}")
    path = case.path.replace("{viewer_token}", target.tokens["viewer"])
    raw_headers = [(k.encode(), v.encode("utf-8")) for k, v in headers.items()]  # a hostile value may be any text
    client.cookies.clear()  # every case stands alone: only `session` cases carry the dashboard cookie
    request = client.build_request(case.method, path, headers=raw_headers, content=case.body)
    response = client.send(request, stream=True)
    try:
        if "text/event-stream" in response.headers.get("content-type", ""):
            text = ""  # an open live stream: its headers are the answer
        else:
            text = response.read()[:200_000].decode("utf-8", errors="replace")
    finally:
        response.close()
    return response.status_code, dict(response.headers), text


def _check(case: Case, status: int, headers: dict[str, str], text: str, secrets: list[str]) -> str | None:
    if status >= 500:
        return f"{status}: {text[:300]}"
    leak = LEAKS.search(text)
    if leak:
        return f"leaks {leak.group(0)!r}: {text[max(0, leak.start() - 100) : leak.end() + 100]!r}"
    blob = text + "\n" + "\n".join(f"{k}: {v}" for k, v in headers.items())
    for secret in secrets:
        if secret in blob:
            return f"echoes token text {secret[:24]}..."
    if "INTERNAL_SERVER_ERROR" in text:
        return f"an internal error: {text[:300]}"
    if any(k.lower() == "x-injected" for k in headers):
        return "a header was injected"
    anonymous = case.who in {"anonymous", "norole"} or case.who.startswith("forged:")
    if case.protected and anonymous and 200 <= status < 300:
        return f"authentication bypassed: {status}"
    if case.expect and status not in case.expect:
        return f"status {status}, expected one of {case.expect}: {text[:200]}"
    return None


def _ws_cases(target: Target, world: World) -> list[tuple[str, dict[str, str], list[Any], set[int]]]:
    """(label, handshake headers, messages to send, close codes that are right)."""
    viewer = {"type": "connection_init", "payload": {"Authorization": f"Bearer {target.tokens['viewer']}"}}
    cases: list[tuple[str, dict[str, str], list[Any], set[int]]] = []
    for name, token in world.forged.items():
        cases.append((f"forged {name}", {}, [{"type": "connection_init", "payload": {"token": token}}], {4401}))
        cases.append(
            (
                f"forged header {name}",
                {},
                [{"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}}],
                {4401},
            )
        )
    for payload in ([1, 2], "x", 12, None, {"token": 12}, {"token": ""}, {}, {"Authorization": "Basic x"}):
        cases.append((f"init payload {payload!r}", {}, [{"type": "connection_init", "payload": payload}], {4401, 4400}))
    cases.append(("norole", {}, [{"type": "connection_init", "payload": {"token": target.tokens["norole"]}}], {4403}))
    for origin in ("http://evil.example", "null"):
        cases.append((f"origin {origin}", {"Origin": origin}, [viewer], {403}))
    for after in NUMBERS:
        subscribe = {
            "id": "1",
            "type": "subscribe",
            "payload": {
                "query": "subscription($a: String) { auditEvents(after: $a) { position } }",
                "variables": {"a": after},
            },
        }
        cases.append((f"after {after!r}", {}, [viewer, subscribe], set()))
    for document in (
        "subscription { ...F }",
        "subscription { nosuch }",
        "{ viewer { name } } { viewer { name } }",
        "{" * 300,
    ):
        cases.append(
            (
                f"document {document[:20]}",
                {},
                [viewer, {"id": "1", "type": "subscribe", "payload": {"query": document}}],
                set(),
            )
        )
    gid = base64.urlsafe_b64encode(f"Workflow:{2**63}".encode()).decode().rstrip("=")
    huge = {
        "id": "1",
        "type": "subscribe",
        "payload": {"query": f'subscription {{ attemptUpdates(workflowId: "{gid}") {{ position }} }}'},
    }
    cases.append(("huge workflow id", {}, [viewer, huge], set()))
    for raw in (
        "not json",
        "[]",
        '{"type": 12}',
        '{"type": "subscribe"}',
        "\udcff" * 0 + '{"type":"connection_init","payload":' * 300,
    ):
        cases.append((f"frame {raw[:20]!r}", {}, [viewer, raw], {4400, 4401, 4409}))
    cases.append(
        (
            "subscribe before init",
            {},
            [{"id": "1", "type": "subscribe", "payload": {"query": "subscription { auditEvents { position } }"}}],
            {4401},
        )
    )
    return cases


def _run_ws(target: Target, headers: dict[str, str], messages: list[Any], secrets: list[str]) -> tuple[str, str | None]:
    """Send the messages; the answer is the first server message after them, or the close."""
    url = target.server.ws_url
    try:
        with connect(url, subprotocols=[PROTOCOL], additional_headers=headers, open_timeout=10, close_timeout=2) as ws:
            replies: list[str] = []
            for message in messages:
                ws.send(message if isinstance(message, str) else json.dumps(message))
                try:
                    replies.append(str(ws.recv(timeout=5)))
                except TimeoutError:
                    pass
            text = "\n".join(replies)
            ws.close()
            outcome = "open"
    except InvalidStatus as exc:
        return f"http {exc.response.status_code}", None
    except ConnectionClosed as exc:
        code = exc.rcvd.code if exc.rcvd else 1006
        reason = exc.rcvd.reason if exc.rcvd else ""
        if code == 1011:
            return f"close {code}", f"internal error close: {reason}"
        text, outcome = reason, f"close {code}"
    leak = LEAKS.search(text)
    if leak:
        return outcome, f"leaks {leak.group(0)!r}: {text[:300]!r}"
    if any(secret in text for secret in secrets):
        return outcome, "echoes token text"
    if '"INTERNAL_SERVER_ERROR"' in text:
        return outcome, f"internal error: {text[:300]}"
    return outcome, None


def test_hostile_requests_get_clear_refusals_never_a_500(target: Target) -> None:
    world = make_world(target)
    secrets = _secrets(target, world)
    cases = http_cases(world)
    ws_cases = _ws_cases(target, world)
    assert len(cases) + len(ws_cases) >= MIN_REQUESTS, len(cases) + len(ws_cases)
    started = time.monotonic()
    problems: list[str] = []
    statuses: Counter[int] = Counter()
    sent = 0
    with httpx.Client(base_url=target.server.url, timeout=20, follow_redirects=False) as client:
        for case in cases:
            if time.monotonic() - started > DEADLINE_SECONDS:
                break
            try:
                status, headers, text = _send(client, target, world, case)
            except httpx.TransportError as exc:
                problems.append(f"{case.label}: no answer ({exc!r})")
                sent += 1
                continue
            sent += 1
            statuses[status] += 1
            problem = _check(case, status, headers, text, secrets)
            if problem:
                problems.append(f"{case.label}: {problem}")
    for label, headers, messages, closes in ws_cases:
        if time.monotonic() - started > DEADLINE_SECONDS:
            break
        outcome, problem = _run_ws(target, headers, messages, secrets)
        sent += 1
        if problem is None and closes and not any(outcome in (f"close {c}", f"http {c}") for c in closes):
            problem = f"{outcome}, expected one of {sorted(closes)}"
        if problem:
            problems.append(f"[ws] {label}: {problem}")
    # class 11 over the WebSocket: a token in the upgrade URL must not reach the log either
    try:
        url = f"{target.server.ws_url}?access_token={target.tokens['viewer']}"
        with connect(url, subprotocols=[PROTOCOL], open_timeout=10, close_timeout=2) as ws:
            ws.send(json.dumps({"type": "connection_init", "payload": {}}))
            with contextlib.suppress(TimeoutError, ConnectionClosed):
                ws.recv(timeout=5)
    except ConnectionClosed:
        pass
    sent += 1
    print(f"hostile requests sent: {sent} ({len(cases)} HTTP, {len(ws_cases)} WebSocket); statuses {dict(statuses)}")
    assert sent >= MIN_REQUESTS, f"only {sent} requests within {DEADLINE_SECONDS} s"
    assert not problems, f"{len(problems)} of {sent} hostile requests went wrong:\n" + "\n".join(problems[:60])
    log = target.server.log()
    for token in target.tokens.values():
        assert token not in log, "a bearer token reached the server log"
    assert "GraphQL error id" not in log and "Exception in ASGI application" not in log, log[-3000:]


# Only SQLite can hold bytes that are not UTF-8 in a TEXT column (PostgreSQL refuses them on write).
@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_invalid_text_is_shown_with_replacement_characters(target: Target) -> None:
    """Class 9 on a real server: a non-UTF-8 value written by another tool does not take pages down."""
    shown = INVALID_UTF8.decode("utf-8", errors="replace")
    attempt = target.seeded.attempts[0]
    bearer = {"Authorization": f"Bearer {target.tokens['viewer']}"}
    with httpx.Client(base_url=target.server.url, headers=bearer, timeout=20) as client:
        for path in (
            "/dashboard/workflow",
            f"/dashboard/jobs/{attempt.slurm_job_id}/attempts/{attempt.attempt_index}",
            "/dashboard/audit",
            "/dashboard/advice?show=all",
        ):
            page = client.get(path)
            assert page.status_code == 200 and "\ufffd" in page.text, path
        rest = client.get("/v1/workflows").json()
        assert rest["workflows"][0]["latestJobName"] == shown
        body = client.post("/graphql", json={"query": "{ workflows { nodes { latestJobName } } }"}).json()
        assert body["data"]["workflows"]["nodes"][0]["latestJobName"] == shown


def test_sign_out_revokes_the_session_on_the_server(target: Target) -> None:
    """Class 7 on a real server: after sign-out a copy of the cookie no longer works."""
    cookie = {"Cookie": f"recovery_dashboard={target.session_cookie}"}
    with httpx.Client(base_url=target.server.url, timeout=20, follow_redirects=False) as client:
        page = client.get("/dashboard/workflow", headers=cookie)
        assert page.status_code == 200
        csrf = re.search(r'name="csrf-token" content="([^"]+)"', page.text)
        assert csrf
        assert client.get("/dashboard/auth/logout", headers=cookie).status_code == 405
        refused = client.post("/dashboard/auth/logout", headers={**cookie, "Origin": target.origin})
        assert refused.status_code == 403
        bye = client.post(
            "/dashboard/auth/logout", headers={**cookie, "Origin": target.origin}, data={"csrf_token": csrf.group(1)}
        )
        assert bye.status_code == 200 and "signed out" in bye.text
        again = client.get("/dashboard/workflow", headers=cookie)  # the copied cookie, sent after sign-out
        assert again.status_code == 303 and "/dashboard/auth/login" in again.headers["location"]


REBINDING_HOSTS = [
    "evil.example",
    "127.0.0.1.nip.io",
    "localhost.evil.example",
    "attacker.test:8000",
    "10.0.0.1",
    "0.0.0.0",
]


def _upgrade_status(url: str, host: str, origin: str | None = None) -> int:
    """The HTTP status of a raw WebSocket upgrade request sent with `host` (101 = accepted)."""
    import socket

    parts = httpx.URL(url)
    request = (
        f"GET {parts.path}/graphql HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        f"Sec-WebSocket-Protocol: {PROTOCOL}\r\n" + (f"Origin: {origin}\r\n" if origin else "") + "\r\n"
    )
    with socket.create_connection((parts.host, parts.port), timeout=10) as sock:
        sock.sendall(request.encode())
        status_line = sock.recv(4096).split(b"\r\n", 1)[0].decode()
    return int(status_line.split()[1])


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_dev_mode_server_refuses_rebinding_hosts_and_cross_site_writes(database: Any, tmp_path: Any) -> None:
    """Class 2 on a real dev-mode server: a DNS-rebinding page (foreign Host) and foreign origins get nothing."""
    from tests.api.helpers import start_server, stop_server

    server = start_server(database.url, tmp_path, RECOVERY_DEV_NO_AUTH="true")
    own = httpx.URL(server.url)
    assert own.port is not None
    routes = [
        "/graphql?query=%7Bviewer%7Bname%7D%7D",
        "/v1/workflows",
        "/dashboard/workflow",
        "/dashboard/advice",
        "/static/dashboard.css",
    ]
    sent, problems = 0, []
    try:
        with httpx.Client(base_url=server.url, timeout=20, follow_redirects=False) as client:
            for host in REBINDING_HOSTS:
                for path in routes:
                    response = client.get(path, headers={"Host": host})
                    sent += 1
                    if response.status_code != 400 or "Host not allowed" not in response.text:
                        problems.append(f"Host {host} GET {path}: {response.status_code}")
                response = client.post("/graphql", json={"query": "{ viewer { name } }"}, headers={"Host": host})
                sent += 1
                if response.status_code != 400:
                    problems.append(f"Host {host} POST /graphql: {response.status_code}")
                status = _upgrade_status(server.url, host)
                sent += 1
                if status == 101:
                    problems.append(f"Host {host}: WebSocket accepted")
            for host in (f"127.0.0.1:{own.port}", f"localhost:{own.port}"):
                response = client.get("/v1/workflows", headers={"Host": host})
                sent += 1
                if response.status_code != 200:
                    problems.append(f"own Host {host}: {response.status_code}")
            for origin in ("http://evil.example", "null", f"http://127.0.0.1:{own.port + 1}"):
                mutation = {"query": 'mutation { approveAdvice(id: "QWR2aWNlOjE") { id } }'}
                for response in (
                    client.post("/graphql", json=mutation, headers={"Origin": origin}),
                    client.post("/dashboard/advice/1/approve", headers={"Origin": origin}),
                    client.post("/dashboard/auth/logout", headers={"Origin": origin}),
                ):
                    sent += 1
                    if response.status_code != 403:
                        problems.append(f"Origin {origin} {response.request.url.path}: {response.status_code}")
                status = _upgrade_status(server.url, f"127.0.0.1:{own.port}", origin)
                sent += 1
                if status == 101:
                    problems.append(f"Origin {origin}: WebSocket accepted")
    finally:
        stop_server(server)
    print(f"dev-mode requests sent: {sent}")
    assert not problems, "\n".join(problems)
    assert "Exception in ASGI application" not in server.log()
