"""One test per bad-input class of issue 14 (in-process apps; the real-server suite is test_hostile.py)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.engine import make_url

from app.api.ids import to_global_id
from app.domain.edge import bounds
from app.domain.edge.cursor import CursorError, decode_cursor, encode_cursor
from app.infra.config import Settings
from app.infra.context import AppContext
from app.infra.log_masking import AccessLogFilter, mask_url, redact_target
from app.main import create_app
from tests.factories import seed_many
from tests.hostile.cases import forged_tokens
from tests.plugins.database import PG_SERVER, Database
from tests.plugins.oidc_provider import OidcProvider
from tests.views.server import serve

LOCAL = "http://127.0.0.1"


@contextlib.asynccontextmanager
async def app_client(database: Database, tmp_path: Path, **values: Any) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings.build(database_url=database.url, data_dir=str(tmp_path), cluster="test", **values)
    app = create_app(settings, ctx=AppContext(settings=settings, engine=database.engine, sessions=database.sessions))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=LOCAL) as client:
        yield client


def dev(database: Database, tmp_path: Path) -> Any:
    return app_client(database, tmp_path, dev_no_auth=True)


# ---- 1. token text is never echoed into headers ------------------------------------------------------------


@pytest.mark.oidc
@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_1_forged_jose_header_text_never_reaches_a_header(
    oidc_provider: OidcProvider, database: Database, tmp_path: Path
) -> None:
    values = {"oidc_issuer": oidc_provider.issuer, "oidc_audience": oidc_provider.audience}
    async with app_client(database, tmp_path, **values) as client:
        for name, token in forged_tokens(oidc_provider.signing_key.kid or "no-kid").items():
            for path in ("/v1/workflows", "/graphql", "/dashboard/workflow"):
                response = await client.get(path, headers={"Authorization": f"Bearer {token}"})
                assert response.status_code == 401, (name, path, response.text)
                challenge = response.headers.get("www-authenticate", "")
                assert challenge.isascii() and "\r" not in challenge and "\n" not in challenge, (name, challenge)
                assert "☃" not in challenge and "ключ" not in challenge and "Set-Cookie" not in challenge
                assert "x-injected" not in response.headers
                assert token not in response.text


# ---- 2. Host allowlist in dev mode, Origin on state-changing requests --------------------------------------


async def test_2_dev_mode_refuses_foreign_hosts_and_cross_site_writes(database: Database, tmp_path: Path) -> None:
    seeded = await seed_many(database.sessions, count=1, advice=True)
    advice = seeded.advice[0].id
    async with dev(database, tmp_path) as client:
        for host in ("evil.example", "127.0.0.1.evil.example", "localhost.evil.example:80", "10.0.0.1"):
            refused = await client.get("/dashboard/workflow", headers={"Host": host})
            assert refused.status_code == 400 and "Host not allowed" in refused.text, host
            assert (
                await client.post("/graphql", json={"query": "{ viewer { name } }"}, headers={"Host": host})
            ).status_code == 400
        for host in ("127.0.0.1:8000", "localhost", "[::1]:8000"):
            assert (await client.get("/dashboard/workflow", headers={"Host": host})).status_code == 200, host
        page = await client.get("/dashboard/advice")
        token = page.text.split('name="csrf-token" content="', 1)[1].split('"', 1)[0]
        mutation = {"query": f'mutation {{ approveAdvice(id: "{to_global_id("Advice", advice)}") {{ review }} }}'}
        for origin in ("http://evil.example", "http://127.0.0.1.evil.example", "null"):
            headers = {"Origin": origin}
            assert (await client.post("/graphql", json=mutation, headers=headers)).status_code == 403
            action = await client.post(
                f"/dashboard/advice/{advice}/approve", data={"csrf_token": token}, headers=headers
            )
            assert action.status_code == 403 and "cross-site" in action.text
            assert (
                await client.post("/dashboard/auth/logout", data={"csrf_token": token}, headers=headers)
            ).status_code == 403
        referer = await client.post(
            f"/dashboard/advice/{advice}/approve",
            data={"csrf_token": token},
            headers={"Referer": "http://evil.example/"},
        )
        assert referer.status_code == 403
        # a cookie-carrying write without Origin or Referer is not what a browser sends
        assert (await client.post(f"/dashboard/advice/{advice}/approve", data={"csrf_token": token})).status_code == 403
        same_site = await client.post(
            f"/dashboard/advice/{advice}/approve", data={"csrf_token": token}, headers={"Origin": LOCAL}
        )
        assert same_site.status_code == 303
        assert (await client.post("/graphql", json=mutation, headers={"Origin": LOCAL})).status_code == 200
        # behind a reverse proxy that rewrites Host, the forwarded host is the page's origin
        proxied = {"Origin": "https://recovery.example.org", "X-Forwarded-Host": "recovery.example.org"}
        assert (await client.post("/graphql", json=mutation, headers=proxied)).status_code == 200


# ---- 3. unexpected GraphQL errors are masked, documented codes kept ----------------------------------------


async def test_3_graphql_masks_internal_errors_with_an_error_id(
    database: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("(sqlite3.OperationalError) near 'x' [SQL: SELECT secret FROM workflows WHERE id = ?]")

    monkeypatch.setattr("app.advice.queries.list_overview", broken)  # what Query.workflows reads through
    async with dev(database, tmp_path) as client:
        with caplog.at_level(logging.ERROR, logger="recovery.api"):
            body = (await client.post("/graphql", json={"query": "{ workflows { nodes { id } } }"})).json()
        error = body["errors"][0]
        assert "SQL" not in json.dumps(body) and "secret" not in json.dumps(body)
        assert error["extensions"]["code"] == "INTERNAL_SERVER_ERROR" and error["path"] == ["workflows"]
        eid = error["extensions"]["errorId"]
        assert eid in error["message"]
        logged = [r for r in caplog.records if eid in r.getMessage()]
        assert logged and logged[0].exc_info and "SELECT secret" in logged[0].getMessage()
        documented = (await client.post("/graphql", json={"query": '{ node(id: "nope") { id } }'})).json()
        assert documented["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
        assert "invalid id" in documented["errors"][0]["message"]


def test_3_subscription_errors_are_masked_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from starlette.testclient import TestClient

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("[SQL: SELECT secret FROM change_feed]")

    import importlib.util

    # The change feed's reads live in app.feed.queries after the layout refactor, in app.feed.service before.
    feed_reads = "app.feed.queries" if importlib.util.find_spec("app.feed.queries") else "app.feed.service"
    monkeypatch.setattr(f"{feed_reads}.latest_id", broken)
    settings = Settings.build(
        database_url=f"sqlite+aiosqlite:///{tmp_path}/ws.db", data_dir=str(tmp_path), dev_no_auth=True
    )
    with TestClient(create_app(settings), base_url=LOCAL) as client:
        with client.websocket_connect(
            "/graphql", subprotocols=["graphql-transport-ws"], headers={"host": "127.0.0.1"}
        ) as ws:
            ws.send_json({"type": "connection_init", "payload": {}})
            assert ws.receive_json()["type"] == "connection_ack"
            query = "subscription { auditEvents { position } }"
            ws.send_json({"id": "1", "type": "subscribe", "payload": {"query": query}})
            reply = ws.receive_json()
    error = reply["payload"]["errors"][0]
    assert "SQL" not in json.dumps(reply) and error["extensions"]["code"] == "INTERNAL_SERVER_ERROR"


# ---- 4. ids, times and cursors are range-checked at the edge ----------------------------------------------


@pytest.mark.parametrize("text", ["²", "١٢٣", "１２", "-1", "1.0", "", " ", str(2**63), "9" * 20, "0x1"])
def test_4_bounds_accept_only_ascii_digits_within_int64(text: str) -> None:
    with pytest.raises(bounds.BoundsError):
        bounds.parse_int(text, "id", minimum=0)
    assert bounds.parse_int(str(2**63 - 1), "id") == 2**63 - 1


def test_4_cursors_with_huge_ids_or_far_times_are_refused() -> None:
    for values in ([2**63], [-(2**63) - 1], [{"t": "9999-12-31T23:59:59-05:00"}]):
        raw = json.dumps(["workflows", values])
        cursor = base64.urlsafe_b64encode(("k1:" + raw).encode()).decode().rstrip("=")
        with pytest.raises(CursorError):
            decode_cursor("workflows", cursor, 1)
    assert decode_cursor("workflows", encode_cursor("workflows", [2**63 - 1]), 1) == (2**63 - 1,)


async def test_4_out_of_range_numbers_get_a_400_on_every_route_family(database: Database, tmp_path: Path) -> None:
    huge, superscript = str(2**63), "%C2%B2"
    gid = base64.urlsafe_b64encode(f"Workflow:{2**63}".encode()).decode().rstrip("=")
    cursor = base64.urlsafe_b64encode(b'k1:["workflows",[99999999999999999999999,1]]').decode().rstrip("=")
    async with dev(database, tmp_path) as client:
        for path in (
            f"/v1/jobs/by-scheduler-id/{huge}",
            f"/v1/audit/events?jobId={superscript}",
            f"/v1/audit/events?jobId=1&attemptIndex={huge}",
            "/v1/audit/events?producedAfter=9999-12-31T23:00:00-05:00",
            f"/v1/workflows?pageToken={cursor}",
            f"/dashboard/jobs/{huge}",
            f"/dashboard/jobs/1/attempts/{huge}",
        ):
            response = await client.get(path)
            assert response.status_code == 400, (path, response.status_code, response.text[:200])
        # a workflow URL names the workflow id (any text, digits too): an unknown one is a 404 page, never a 500
        for path in (f"/dashboard/workflow/{huge}", f"/dashboard/workflow/{superscript}"):
            response = await client.get(path)
            assert response.status_code == 404 and "Unknown workflow" in response.text, path
        sse = await client.get("/dashboard/live?view=overview", headers={"Last-Event-ID": "²".encode()})
        assert sse.status_code == 400 and "Last-Event-ID" in sse.text
        audit = await client.get("/dashboard/audit?from=9999-12-31T23:00-05:00")
        assert audit.status_code == 200 and "must be between" in audit.text
        for query, variables in (
            ("query($id: ID!) { node(id: $id) { id } }", {"id": gid}),
            ("query($c: String) { workflows(after: $c) { nodes { id } } }", {"c": cursor}),
            (
                "query($t: DateTime) { auditEvents(filter: {producedAfter: $t}) { nodes { id } } }",
                {"t": "9999-12-31T23:00:00-05:00"},
            ),
        ):
            body = (await client.post("/graphql", json={"query": query, "variables": variables})).json()
            assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT", body


def test_4_subscription_after_is_range_checked() -> None:
    from app.api.errors import ApiError
    from app.api.validation import position

    for after in ("²", str(2**63), "-1", "1e3"):
        with pytest.raises(ApiError):
            position(after)
    assert position("42") == 42


# ---- 5. search is capped everywhere ------------------------------------------------------------------------


async def test_5_search_is_capped_in_graphql_and_rest(database: Database, tmp_path: Path) -> None:
    long = "%" * (bounds.MAX_SEARCH_LENGTH + 1)
    async with dev(database, tmp_path) as client:
        body = (
            await client.post(
                "/graphql",
                json={
                    "query": "query($s: String) { workflows(filter: {search: $s}) { nodes { id } } }",
                    "variables": {"s": long},
                },
            )
        ).json()
        assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT" and "200" in body["errors"][0]["message"]
        rest = await client.get("/v1/workflows", params={"search": long})
        assert rest.status_code == 400 and "longer than 200" in rest.json()["error"]["message"]
        ok = await client.get("/v1/workflows", params={"search": "%" * bounds.MAX_SEARCH_LENGTH})
        assert ok.status_code == 200
        dashboard = await client.get("/dashboard/workflow", params={"q": "%" * 2000})  # truncated like its search box
        assert dashboard.status_code == 200


# ---- 6. malformed JSON bodies are 400 ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "body,status",
    [
        (b"[" * 50000 + b"]" * 50000, 400),
        (b'{"query": "\xff"}', 400),
        (b'{"query": "{ viewer { name } }", "variables": {"a": "\\ud800"}}', 400),
        (b'{"query": "{ viewer { name } }\\u0000"}', 400),
        (b"12", 400),
        (b"null", 400),
        (b'{"query": ', 400),
        (b"x" * (1024 * 1024 + 1), 413),
    ],
)
async def test_6_malformed_json_bodies_are_refused(
    database: Database, tmp_path: Path, body: bytes, status: int
) -> None:
    async with dev(database, tmp_path) as client:
        response = await client.post("/graphql", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == status, response.text[:200]
    assert response.json()["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"


# ---- 7. sign-out by POST with CSRF ends the session on the server ------------------------------------------


@pytest.mark.oidc
@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_7_sign_out_needs_post_and_csrf_and_revokes_copies_of_the_cookie(
    oidc_provider: OidcProvider, database: Database, tmp_path: Path
) -> None:
    values = {
        "oidc_issuer": oidc_provider.issuer,
        "oidc_audience": oidc_provider.audience,
        "oidc_client_id": oidc_provider.dashboard_client_id,
        "session_secret": "x" * 32,
    }
    base = "http://127.0.0.1:8000"
    settings = Settings.build(database_url=database.url, data_dir=str(tmp_path), cluster="test", **values)
    app = create_app(settings, ctx=AppContext(settings=settings, engine=database.engine, sessions=database.sessions))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=base) as client:
        start = await client.get("/dashboard/auth/login")
        callback = oidc_provider.login(start.headers["location"], "operator-otto")
        assert (await client.get(callback.replace(base, ""))).status_code == 303
        copied = client.cookies.get("recovery_dashboard")
        page = await client.get("/dashboard/workflow")
        token = page.text.split('name="csrf-token" content="', 1)[1].split('"', 1)[0]
        assert (await client.get("/dashboard/auth/logout")).status_code == 405
        assert (await client.post("/dashboard/auth/logout", headers={"Origin": base})).status_code == 403
        bye = await client.post("/dashboard/auth/logout", data={"csrf_token": token}, headers={"Origin": base})
        assert bye.status_code == 200
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=base) as thief:
        again = await thief.get("/dashboard/workflow", headers={"Cookie": f"recovery_dashboard={copied}"})
        assert again.status_code == 303 and "/dashboard/auth/login" in again.headers["location"]


# ---- 8. live streams are limited per authenticated principal -----------------------------------------------


async def test_8_stream_limit_is_per_principal_not_per_cookie(database: Database, tmp_path: Path) -> None:
    settings = Settings.build(database_url=database.url, data_dir=str(tmp_path), cluster="test", dev_no_auth=True)
    app = create_app(settings, ctx=AppContext(settings=settings, engine=database.engine, sessions=database.sessions))
    url = "/dashboard/live?view=overview"
    async with serve(app) as root, contextlib.AsyncExitStack() as stack:
        opened = []
        for _ in range(settings.live_streams_per_principal):
            client = await stack.enter_async_context(httpx.AsyncClient(base_url=root, timeout=15))  # no cookies kept
            opened.append(await stack.enter_async_context(client.stream("GET", url)))
        assert all(r.status_code == 200 for r in opened)
        async with httpx.AsyncClient(base_url=root, timeout=15) as fresh:  # a new cookieless caller: the same dev user
            refused = await fresh.get(url)
        assert refused.status_code == 429 and "dev" in refused.text


# ---- 9. text that is not UTF-8 is shown with replacement characters ----------------------------------------


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_9_invalid_utf8_in_a_text_column_does_not_take_pages_down(database: Database, tmp_path: Path) -> None:
    await seed_many(database.sessions, count=2, advice=True)
    path = make_url(database.url).database
    assert path
    with sqlite3.connect(path) as conn:  # another tool wrote raw bytes into TEXT columns
        conn.execute("UPDATE workflows SET latest_job_name = CAST(? AS TEXT)", (sqlite3.Binary(b"tr\xffin"),))
        conn.execute("UPDATE advice SET reason = CAST(? AS TEXT)", (sqlite3.Binary(b"cr\xc3ash"),))
    async with dev(database, tmp_path) as client:
        for page in ("/dashboard/workflow", "/dashboard/advice?show=all"):
            response = await client.get(page)
            assert response.status_code == 200 and "\ufffd" in response.text, page
        assert (await client.get("/v1/workflows")).json()["workflows"][0]["latestJobName"] == "tr\ufffdin"
        body = (await client.post("/graphql", json={"query": "{ advice { nodes { reason } } }"})).json()
        assert body["data"]["advice"]["nodes"][0]["reason"] == "cr\ufffdash"


# ---- 10. graphql-core's own validation messages ------------------------------------------------------------


async def test_10_graphql_validation_messages_are_the_specs(database: Database, tmp_path: Path) -> None:
    async with dev(database, tmp_path) as client:
        undefined = (await client.post("/graphql", json={"query": "query { ...F }"})).json()
        assert undefined["errors"][0]["message"] == "Unknown fragment 'F'."
        two = (await client.post("/graphql", json={"query": "{ viewer { name } } { viewer { subject } }"})).json()
        assert two["data"] is None
        assert {e["message"] for e in two["errors"]} == {"This anonymous operation must be the only defined operation."}
        over_http = (await client.post("/graphql", json={"query": "subscription { auditEvents { position } }"})).json()
        assert "WebSocket" in over_http["errors"][0]["message"]


# ---- 11. secrets never reach the logs ----------------------------------------------------------------------


def test_11_urls_and_access_log_lines_lose_their_secrets() -> None:
    assert (
        mask_url("postgresql+asyncpg://app:s3cr%40t@db:5432/recovery")
        == "postgresql+asyncpg://app:***@db:5432/recovery"
    )
    assert mask_url("sqlite+aiosqlite:////var/lib/recovery.db") == "sqlite+aiosqlite:////var/lib/recovery.db"
    jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl"
    assert jwt not in redact_target(f"/v1/workflows?access_token={jwt}&limit=1")
    assert "limit=1" in redact_target(f"/v1/workflows?access_token={jwt}&limit=1")
    assert jwt not in redact_target(f"/dashboard/x?next=%2Fdashboard%3Ft%3D{jwt}")
    record = logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        "",
        0,
        '%s - "%s %s HTTP/%s" %d',
        ("1.2.3.4", "GET", f"/x?token={jwt}", "1.1", 200),
        None,
    )
    assert AccessLogFilter().filter(record) and jwt not in record.getMessage()
    websocket = logging.LogRecord(
        "uvicorn.error",
        logging.INFO,
        "",
        0,
        '%s - "WebSocket %s" [accepted]',
        ("1.2.3.4", f"/graphql?token={jwt}"),
        None,
    )
    assert AccessLogFilter().filter(websocket) and jwt not in websocket.getMessage()


@pytest.mark.postgres
@pytest.mark.parametrize("database", ["postgres"], indirect=True)
async def test_11_recovery_up_logs_the_database_url_without_its_password(database: Database, tmp_path: Path) -> None:
    # The test server trusts loopback connections, so any password works; it must never be printed.
    url = database.url.replace("://postgres@", "://postgres:TopSecretPassword@", 1)
    assert "TopSecretPassword" in url, f"the PostgreSQL test URL {PG_SERVER} has no user part to add a password to"
    root = Path(__file__).resolve().parents[2]
    env = {
        "PATH": "/usr/bin:/bin",
        "RECOVERY_DATABASE_URL": url,
        "RECOVERY_DATA_DIR": str(tmp_path),
        "RECOVERY_DEV_NO_AUTH": "true",
        "RECOVERY_BIND": "127.0.0.1:0",
    }
    log = tmp_path / "up.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "up"], cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 60
        while "at revision" not in log.read_text() and process.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    text = log.read_text()
    assert "at revision" in text, text[-2000:]
    assert "TopSecretPassword" not in text and "postgres:***@" in text
