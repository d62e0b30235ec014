"""Subscriptions with real clients against a real uvicorn: Python gql and the reference graphql-ws client (node).

A separate process writes through the services while a subscription is open; the API process sees it
through the change feed (NOTIFY on PostgreSQL, a short poll on SQLite). Reconnecting with the last
position misses nothing.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from typing import Any

import pytest
from gql import Client, GraphQLRequest
from gql.transport.exceptions import TransportQueryError
from gql.transport.websockets import WebsocketsTransport
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.api.limits import MAX_SUBSCRIPTIONS_PER_CONNECTION
from app.feed import queries as feed_queries
from tests.api.helpers import OPERATIONS, ROOT, LiveServer, operation
from tests.factories import seed_job
from tests.plugins.database import Database

JS_DIR = ROOT / "tests" / "js"
pytestmark = pytest.mark.slow


def transport(server: LiveServer, payload: dict[str, Any] | None = None) -> WebsocketsTransport:
    return WebsocketsTransport(
        url=server.ws_url,
        subprotocols=[WebsocketsTransport.GRAPHQLWS_SUBPROTOCOL],
        init_payload=payload if payload is not None else {"Authorization": "Bearer dev-mode-ignores-it"},
    )


async def write_from_another_process(database: Database, *args: str) -> None:
    """Run tests/api/writer.py in its own Python process (a stand-in for `recovery worker`)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.api.writer",
        database.url,
        *args,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    output, _ = await process.communicate()
    assert process.returncode == 0, output.decode()


async def _position(sessions: async_sessionmaker[AsyncSession]) -> str:
    async with sessions() as session:
        return str(await feed_queries.latest_id(session))


async def test_gql_client_sees_changes_written_by_another_process_and_resumes(
    live_server: LiveServer, database: Database, sessions: async_sessionmaker[AsyncSession]
) -> None:
    async with sessions() as session, session.begin():
        await seed_job(session, slurm_job_id=500, workflow_key="live", failed=False)
        await seed_job(session, slurm_job_id=501, workflow_key="other", failed=False)
    start = await _position(sessions)
    request = GraphQLRequest(operation("AttemptUpdates"), variable_values={"jobId": 500, "after": start})

    async with Client(transport=transport(live_server), fetch_schema_from_transport=False) as session:
        updates = session.subscribe(request)
        first = asyncio.ensure_future(updates.__anext__())
        await write_from_another_process(database, "state", "501", "0", "COMPLETED")  # another job: filtered out
        await write_from_another_process(database, "state", "500", "0", "FAILED")
        update = (await asyncio.wait_for(first, timeout=20))["attemptUpdates"]
        await updates.aclose()
    assert update["attempt"]["attemptRef"] == "500-0" and update["attempt"]["state"] == "FAILED"
    assert update["changed"] == ["state"] and int(update["position"]) > int(start)

    # Disconnected: two more changes happen. Reconnecting with the last position delivers both, in order.
    await write_from_another_process(database, "state", "500", "0", "REQUEUED")
    await write_from_another_process(database, "state", "500", "0", "PENDING")
    resumed = GraphQLRequest(operation("AttemptUpdates"), variable_values={"jobId": 500, "after": update["position"]})
    async with Client(transport=transport(live_server), fetch_schema_from_transport=False) as session:
        updates = session.subscribe(resumed)
        resumed_updates = [
            (await asyncio.wait_for(updates.__anext__(), timeout=20))["attemptUpdates"] for _ in range(2)
        ]
        await updates.aclose()
    # Each update says the state as of its change; `attempt` is the attempt as it is now.
    assert [u["state"] for u in resumed_updates] == ["REQUEUED", "PENDING"]
    assert [u["attempt"]["state"] for u in resumed_updates] == ["PENDING", "PENDING"]


async def test_audit_event_subscription_with_filters(
    live_server: LiveServer, database: Database, sessions: async_sessionmaker[AsyncSession]
) -> None:
    start = await _position(sessions)
    request = GraphQLRequest(
        operation("AuditEventsLive"),
        variable_values={"filter": {"jobId": 42, "attemptIndex": 0, "component": "watcher"}, "after": start},
    )
    async with Client(transport=transport(live_server), fetch_schema_from_transport=False) as session:
        updates = session.subscribe(request)
        pending = asyncio.ensure_future(updates.__anext__())
        await write_from_another_process(database, "audit", "41", "2")  # other job
        await write_from_another_process(database, "audit", "42", "3")
        received = [await asyncio.wait_for(pending, timeout=20)]
        received += [await asyncio.wait_for(updates.__anext__(), timeout=20) for _ in range(2)]
        await updates.aclose()
    events = [r["auditEvents"]["event"] for r in received]
    assert [e["message"] for e in events] == ["from worker 0", "from worker 1", "from worker 2"]
    assert {(e["jobId"], e["attemptIndex"], e["component"]) for e in events} == {(42, 0, "watcher")}


async def test_subscriptions_per_connection_are_bounded(live_server: LiveServer) -> None:
    request = GraphQLRequest(operation("AdviceChanges"))
    async with Client(transport=transport(live_server), fetch_schema_from_transport=False) as session:
        streams = [session.subscribe(request) for _ in range(MAX_SUBSCRIPTIONS_PER_CONNECTION)]
        waiting = [asyncio.ensure_future(s.__anext__()) for s in streams]
        await asyncio.sleep(1.0)  # let the server register them
        with pytest.raises(TransportQueryError) as refused:
            await asyncio.wait_for(session.subscribe(request).__anext__(), timeout=20)
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        for stream in streams:
            await stream.aclose()
    assert f"at most {MAX_SUBSCRIPTIONS_PER_CONNECTION} operations per connection" in str(refused.value)


def _node_client(
    server: LiveServer, operation_name: str, variables: dict[str, Any], count: int, token: str | None = None
) -> subprocess.Popen[str]:
    node = shutil.which("node")
    if node is None or not (JS_DIR / "node_modules" / "graphql-ws").is_dir():
        pytest.skip("node or tests/js/node_modules missing: run .ci/bootstrap (npm ci in tests/js)")
    return subprocess.Popen(
        [
            node,
            str(JS_DIR / "subscribe.mjs"),
            server.ws_url,
            str(OPERATIONS / f"{operation_name}.graphql"),
            json.dumps(variables),
            str(count),
            *([token] if token else []),
        ],
        cwd=JS_DIR,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


async def _read_lines(process: subprocess.Popen[str], until: str, timeout: float = 30) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    stdout = process.stdout
    assert stdout is not None  # started with stdout=PIPE
    while True:
        line = await asyncio.wait_for(loop.run_in_executor(None, stdout.readline), timeout=timeout)
        if not line:
            return lines
        try:
            lines.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"node client printed {line!r}") from None
        if until in lines[-1]:
            return lines


async def test_reference_graphql_ws_client(
    live_server: LiveServer, database: Database, sessions: async_sessionmaker[AsyncSession]
) -> None:
    async with sessions() as session, session.begin():
        await seed_job(session, slurm_job_id=600, workflow_key="js", failed=False)
    start = await _position(sessions)
    client = _node_client(
        live_server, "AttemptUpdates", {"jobId": 600, "after": start}, count=2, token="anything-in-dev-mode"
    )
    try:
        assert (await _read_lines(client, "ready"))[-1] == {"ready": True}
        await write_from_another_process(database, "state", "600", "0", "FAILED")
        await write_from_another_process(database, "state", "600", "0", "REQUEUED")
        lines = await _read_lines(client, "closed")
        assert client.wait(timeout=20) == 0, lines
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
        if client.stdout is not None:
            client.stdout.close()
    states = [line["next"]["data"]["attemptUpdates"]["state"] for line in lines if "next" in line]
    assert states == ["FAILED", "REQUEUED"]
