"""Live updates: the change feed filtered per page becomes small SSE "changed" events; streams per session
are bounded."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from types import SimpleNamespace
from typing import Any

import httpx

from app.feed.tail import shared_tail
from app.infra.config import Settings
from app.infra.context import AppContext
from app.jobs import service as jobs
from app.jobs.models import Attempt
from app.main import create_app
from tests.factories import seed_history
from tests.views.helpers import OPERATOR_TOKEN, VIEWER_TOKEN, dashboard_settings
from tests.views.server import serve
from views.live import FeedMatch, StreamLimiter, changes


def test_stream_limiter_bounds_streams_per_session() -> None:
    limiter = StreamLimiter(limit=2)
    assert limiter.acquire("a") and limiter.acquire("a") and not limiter.acquire("a")
    assert limiter.acquire("b")
    limiter.release("a")
    assert limiter.acquire("a")
    limiter.release("a")
    limiter.release("a")
    limiter.release("b")
    assert limiter.open == {}


def test_feed_match_filters_by_page() -> None:
    def entry(**kw: object) -> SimpleNamespace:
        return SimpleNamespace(**({"topic": "attempt", "workflow_id": None, "cluster": "c", "slurm_job_id": None} | kw))

    job = FeedMatch(frozenset({"attempt", "advice"}), slurm_job_id=7)
    assert (
        job(entry(slurm_job_id=7))
        and not job(entry(slurm_job_id=8))
        and not job(entry(topic="workflow", slurm_job_id=7))
    )
    workflow = FeedMatch(frozenset({"attempt", "advice"}), workflow_id=3, jobs=frozenset({("c", 9)}))
    assert (
        workflow(entry(workflow_id=3))
        and workflow(entry(topic="advice", slurm_job_id=9))
        and not workflow(entry(workflow_id=4))
    )


async def _update_state(sessions: Any, attempt_id: int, state: str) -> None:
    async with sessions() as session, session.begin():
        attempt = await session.get(Attempt, attempt_id)
        await jobs.update_attempt(session, attempt=attempt, state=state)


async def test_changes_yields_only_for_the_pages_job(sessions, settings) -> None:
    seeded = await seed_history(sessions)
    other = await seed_history(sessions, slurm_job_id=9000)
    stream = changes(
        shared_tail(settings.database_url, sessions),
        FeedMatch(frozenset({"attempt"}), slurm_job_id=seeded.slurm_job_id),
        after_id=None,
    )
    assert isinstance(stream, AsyncGenerator)
    ready = await asyncio.wait_for(stream.__anext__(), 5)
    assert ready["event"] == "ready"
    await _update_state(sessions, other.attempt_ids[1], "COMPLETING")  # another job: no event
    pending = asyncio.ensure_future(stream.__anext__())
    await asyncio.sleep(0.8)
    assert not pending.done()
    await _update_state(sessions, seeded.attempt_ids[1], "COMPLETED")
    changed = await asyncio.wait_for(pending, 5)
    assert changed["event"] == "changed" and json.loads(changed["data"])["topics"] == ["attempt"]
    await stream.aclose()


_LINES: dict[int, Any] = {}


async def _read_events(response: httpx.Response, wanted: str, timeout: float = 10) -> dict[str, str]:
    """The next event named `wanted` (the response's line iterator is kept: a stream can be iterated once)."""
    lines = _LINES.setdefault(id(response), response.aiter_lines())

    async def read() -> dict[str, str]:
        event: dict[str, str] = {}
        async for line in lines:
            if not line:
                if event.get("event") == wanted:
                    return event
                event = {}
                continue
            key, _, value = line.partition(":")
            event[key] = value.strip()
        raise AssertionError("stream ended")

    return await asyncio.wait_for(read(), timeout)


async def test_sse_stream_over_real_http_sends_changed_and_bounds_streams(
    database, settings, stub_tokens, sessions
) -> None:
    seeded = await seed_history(sessions)
    configured = dashboard_settings(settings)
    app = create_app(
        configured, ctx=AppContext(settings=configured, engine=database.engine, sessions=database.sessions)
    )
    url = f"/dashboard/live?view=attempt&job={seeded.slurm_job_id}"
    async with serve(app) as base, httpx.AsyncClient(base_url=base, timeout=15) as client:
        headers = {"Authorization": f"Bearer {VIEWER_TOKEN}", "Accept": "text/event-stream"}
        async with client.stream("GET", url, headers=headers) as response:
            assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
            await _read_events(response, "ready")
            await _update_state(sessions, seeded.attempt_ids[1], "COMPLETED")
            changed = await _read_events(response, "changed")
            assert "attempt" in json.loads(changed["data"])["topics"]
        bad = await client.get("/dashboard/live?view=nonsense", headers=headers)
        assert bad.status_code == 400
        # the per-session bound: the operator's extra stream is refused while the limit is reached
        op = {"Authorization": f"Bearer {OPERATOR_TOKEN}", "Accept": "text/event-stream"}
        async with contextlib_streams(client, url, op, Settings.build().live_streams_per_principal) as opened:
            assert all(r.status_code == 200 for r in opened)
            refused = await client.get(url, headers=op)
            assert refused.status_code == 429 and "too many live streams" in refused.text
        await asyncio.sleep(0.3)
        async with client.stream("GET", url, headers=op) as again:  # released when the streams closed
            assert again.status_code == 200


def contextlib_streams(client: httpx.AsyncClient, url: str, headers: dict[str, str], count: int) -> Any:
    import contextlib

    @contextlib.asynccontextmanager
    async def opened() -> Any:
        async with contextlib.AsyncExitStack() as stack:
            responses = [
                await stack.enter_async_context(client.stream("GET", url, headers=headers)) for _ in range(count)
            ]
            for response in responses:
                await _read_events(response, "ready")
            yield responses

    return opened()


async def test_audit_events_page_streams_new_audit_events() -> None:
    from types import SimpleNamespace

    from starlette.requests import Request

    from views.live import match_for

    def request(query: bytes) -> Request:
        return Request(
            {"type": "http", "method": "GET", "path": "/dashboard/live", "query_string": query, "headers": []}
        )

    every = await match_for(request(b"view=audit"))
    one_job = await match_for(request(b"view=audit&job=7"))
    assert every is not None and one_job is not None

    def entry(topic: str, job: int) -> SimpleNamespace:
        return SimpleNamespace(topic=topic, slurm_job_id=job, workflow_id=None, cluster="c")

    assert every(entry("audit", 8)) and not one_job(entry("audit", 8))
    assert one_job(entry("audit", 7)) and not every(entry("attempt", 7))
