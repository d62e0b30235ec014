"""A PostgreSQL server of the test's own stops and starts while the API serves and a live stream is open.

While it is away: REST, GraphQL and the dashboard answer 503 with a coded, clear error (never a 500,
never the driver's text with host and port); afterwards they answer again, and a live stream that
was open the whole time goes on from its position.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from gql import Client, GraphQLRequest
from gql.transport.websockets import WebsocketsTransport
from sqlalchemy import select

from app.audit import service as audit
from app.feed import queries as feed_queries
from app.feed.tail import shared_tail
from app.infra.config import Settings
from app.infra.context import AppContext
from app.infra.db import create_engine, session_factory
from app.infra.errors import DATABASE_UNAVAILABLE
from app.infra.migrate import upgrade
from app.jobs import service as jobs
from app.jobs.models import Attempt
from app.main import create_app
from tests.api.helpers import operation, start_server, stop_server
from tests.factories import seed_job
from tests.plugins.own_postgres import OwnPostgres
from views.live import changes

LEAKS = ("Errno", "127.0.0.1", "Connect call failed", "asyncpg", "SELECT", "Traceback")


async def _answers(http: httpx.AsyncClient) -> dict[str, httpx.Response]:
    return {
        "rest": await http.get("/v1/workflows"),
        "graphql": await http.post("/graphql", json={"query": "{ workflows(first: 1) { nodes { id } } }"}),
        "dashboard": await http.get("/dashboard/workflow", headers={"accept": "text/html"}),
        # API pages read in autocommit sessions (app.infra.db.read_session_factory), on the same pre-pinged pool.
        "rest_audit": await http.get("/v1/audit/events", params={"jobId": 1, "limit": 1}),
        "graphql_audit": await http.post(
            "/graphql", json={"query": "{ auditEvents(filter: {jobId: 1}, first: 1) { edges { node { id } } } }"}
        ),
    }


ANSWERING = {"rest": 200, "graphql": 200, "dashboard": 200, "rest_audit": 200, "graphql_audit": 200}


@pytest.fixture
async def app_on_own_postgres(own_postgres: OwnPostgres, tmp_path: Path) -> AsyncIterator[AppContext]:
    engine = create_engine(own_postgres.url, pool_timeout=3)
    await upgrade(engine)
    settings = Settings.build(
        database_url=own_postgres.url, data_dir=str(tmp_path), cluster="outage", environment="outage", dev_no_auth=True
    )
    ctx = AppContext(settings=settings, engine=engine, sessions=session_factory(engine))
    yield ctx
    await engine.dispose()


async def test_api_answers_503_while_postgres_is_away_and_streams_resume(
    own_postgres: OwnPostgres, app_on_own_postgres: AppContext
) -> None:
    ctx = app_on_own_postgres
    app = create_app(ctx.settings, ctx=ctx)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        before = await _answers(http)
        assert {name: r.status_code for name, r in before.items()} == ANSWERING

        tail = shared_tail(ctx.settings.database_url, ctx.sessions)
        stream = cast(
            AsyncGenerator[dict[str, Any], None],
            changes(tail, lambda entry: entry.topic == "audit", after_id=None),
        )
        ready = await anext(stream)
        start = int(ready["id"])
        following: asyncio.Task[dict[str, Any]] = asyncio.ensure_future(
            anext(stream)
        )  # waits for the next change, across the outage

        await asyncio.to_thread(own_postgres.stop)
        away = await _answers(http)
        for name, response in away.items():
            assert response.status_code == 503, (name, response.text[:500])
            assert response.headers.get("retry-after"), name
            assert not any(leak in response.text for leak in LEAKS), (name, response.text[:500])
        for rest in ("rest", "rest_audit"):
            assert away[rest].json()["error"]["code"] == DATABASE_UNAVAILABLE
        for graphql in ("graphql", "graphql_audit"):
            [error] = away[graphql].json()["errors"]
            assert error["extensions"]["code"] == DATABASE_UNAVAILABLE and "not reachable" in error["message"]
        assert away["dashboard"].headers["content-type"].startswith("text/html")
        assert "Database unavailable" in away["dashboard"].text
        await asyncio.sleep(1)
        assert not following.done()  # the stream stays open while the database is away

        await asyncio.to_thread(own_postgres.start)
        async with ctx.sessions() as session, session.begin():
            await audit.record(session, component="test", event_type="test.after_outage", message="after the outage")
        changed = await asyncio.wait_for(following, 60)
        assert changed["event"] == "changed" and int(changed["id"]) > start
        await stream.aclose()
        after = await _answers(http)
        assert {name: r.status_code for name, r in after.items()} == ANSWERING


async def test_real_server_answers_503_and_an_open_subscription_resumes(
    own_postgres: OwnPostgres, app_on_own_postgres: AppContext, tmp_path: Path
) -> None:
    ctx = app_on_own_postgres
    async with ctx.sessions() as session, session.begin():
        await seed_job(session, slurm_job_id=500, workflow_key="live", failed=False)
    async with ctx.sessions() as session:
        start = str(await feed_queries.latest_id(session))
    server = start_server(own_postgres.url, tmp_path, RECOVERY_DEV_NO_AUTH="true")
    try:
        request = GraphQLRequest(operation("AttemptUpdates"), variable_values={"jobId": 500, "after": start})
        transport = WebsocketsTransport(
            url=server.ws_url,
            subprotocols=[WebsocketsTransport.GRAPHQLWS_SUBPROTOCOL],
            init_payload={"Authorization": "Bearer dev-mode-ignores-it"},
        )
        async with Client(transport=transport, fetch_schema_from_transport=False) as session:
            updates = session.subscribe(request)
            first = asyncio.ensure_future(updates.__anext__())
            await asyncio.to_thread(own_postgres.stop)
            async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
                away = await _answers(http)
            for name, response in away.items():
                assert response.status_code == 503, (name, response.text[:500])
                assert not any(leak in response.text for leak in LEAKS), (name, response.text[:500])
            assert not first.done()  # the subscription stays open while the database is away
            await asyncio.to_thread(own_postgres.start)
            async with ctx.sessions() as db, db.begin():
                attempt = await db.scalar(select(Attempt).where(Attempt.slurm_job_id == 500))
                assert attempt is not None
                await jobs.update_attempt(db, attempt=attempt, state="FAILED")
            update = (await asyncio.wait_for(first, timeout=60))["attemptUpdates"]
            await updates.aclose()
    finally:
        stop_server(server)
    assert update["attempt"]["state"] == "FAILED" and int(update["position"]) > int(start)
    assert "Traceback" not in server.log(), server.log()[-3000:]
