"""Server-sent events for live pages: the change feed, filtered to what a page shows, as small "changed" events."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from sse_starlette.sse import EventSourceResponse
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from app.domain.edge import bounds
from app.feed.tail import FeedTail, shared_tail
from app.jobs import queries as job_queries
from views.auth import guarded
from views.render import dashboard_of

log = logging.getLogger("recovery.dashboard")

PING_SECONDS = 15
VIEWS = ("overview", "workflow", "attempt", "advice", "audit")


class StreamLimiter:
    """Counts open event streams per principal so one caller cannot hold unbounded connections."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open: dict[str, int] = {}

    def full(self, key: str) -> bool:
        return self.open.get(key, 0) >= self.limit

    def acquire(self, key: str) -> bool:
        if self.full(key):
            return False
        self.open[key] = self.open.get(key, 0) + 1
        return True

    def release(self, key: str) -> None:
        left = self.open.get(key, 0) - 1
        if left > 0:
            self.open[key] = left
        else:
            self.open.pop(key, None)


@dataclass(frozen=True)
class FeedMatch:
    """Which change-feed entries concern a page: all of some topics, or one workflow / one job."""

    topics: frozenset[str]
    workflow_id: int | None = None
    jobs: frozenset[tuple[str, int]] | None = None  # (cluster, Slurm job id)
    slurm_job_id: int | None = None

    def __call__(self, entry: Any) -> bool:
        if entry.topic not in self.topics:
            return False
        if self.slurm_job_id is not None:
            return entry.slurm_job_id == self.slurm_job_id
        if self.workflow_id is not None:
            if entry.workflow_id == self.workflow_id:
                return True
            # Advice review entries carry no workflow id; match them by the workflow's jobs.
            return self.jobs is not None and (entry.cluster, entry.slurm_job_id) in self.jobs
        return True


async def match_for(request: Request) -> FeedMatch | None:
    """The filter of a stream from its query (`view` plus `workflow` or `job`); None when the query is unusable."""
    q = request.query_params
    view = q.get("view", "")
    if view == "overview":
        return FeedMatch(frozenset({"workflow", "attempt", "job", "advice", "anomaly"}))
    if view == "advice":
        return FeedMatch(frozenset({"advice"}))
    if view == "audit":  # Audit Events: every new event, or the events of one job
        return FeedMatch(frozenset({"audit"}), slurm_job_id=_optional_id(q.get("job")))
    workflow_id = _optional_id(q.get("workflow"))
    slurm_job_id = _optional_id(q.get("job"))
    if view == "workflow" and workflow_id is not None:
        async with dashboard_of(request).ctx.sessions() as session:
            jobs = await job_queries.workflow_job_ids(session, workflow_id=workflow_id)
        return FeedMatch(
            frozenset({"workflow", "attempt", "job", "advice", "anomaly", "checkpoint"}),
            workflow_id=workflow_id,
            jobs=frozenset(jobs),
        )
    if view == "attempt" and slurm_job_id is not None:
        return FeedMatch(
            frozenset({"attempt", "job", "advice", "anomaly", "checkpoint", "audit"}), slurm_job_id=slurm_job_id
        )
    return None


def _optional_id(text: str | None) -> int | None:
    """An id from the query string (ASCII digits within int64), None when absent; anything else is a 400."""
    return bounds.parse_optional_int(text, "id")


def stream_key(request: Request) -> str:
    """Who a stream counts against: the authenticated principal (in dev mode the one dev user), however it
    authenticated, so neither new cookies nor new sessions give new slots."""
    return "principal:" + request.state.principal.subject


async def changes(
    tail: FeedTail, match: Callable[[Any], bool], *, after_id: int | None
) -> AsyncIterator[dict[str, Any]]:
    """Yield one small "changed" event per batch of matching feed entries, forever (the caller cancels); the
    entries come from the process's one shared read of the feed (app/feed/tail.py), not a query per stream."""
    async with tail.subscriber() as subscriber:
        after_id = await subscriber.start(after_id)
        yield {"event": "ready", "data": json.dumps({"position": after_id}), "id": str(after_id)}
        while True:
            entries = await subscriber.next()
            hits = [e for e in entries if match(e)]
            if hits:
                topics = sorted({e.topic for e in hits})
                yield {
                    "event": "changed",
                    "data": json.dumps({"topics": topics, "position": subscriber.position}),
                    "id": str(subscriber.position),
                }


@guarded()
async def live(request: Request) -> Response:
    """GET /dashboard/live?view=…: an event stream of "changed" events for one page."""
    dashboard = dashboard_of(request)
    match = await match_for(request)
    if match is None:
        return PlainTextResponse(
            f"unknown live view: pass view= one of {', '.join(VIEWS)} (workflow= or job= where needed)", status_code=400
        )
    try:
        after_id = bounds.parse_optional_int(request.headers.get("last-event-id"), "Last-Event-ID")
    except bounds.BoundsError as exc:
        return PlainTextResponse(f"{exc}: send back the id of an event this stream sent", status_code=400)
    key = stream_key(request)
    limiter: StreamLimiter = dashboard.streams
    if not limiter.acquire(key):
        return PlainTextResponse(
            f"too many live streams for {request.state.principal.name} (at most {limiter.limit}); "
            "close other dashboard tabs. Pages fall back to polling.",
            status_code=429,
            headers={"Retry-After": "30"},
        )
    tail = shared_tail(dashboard.settings.database_url, dashboard.ctx.sessions)

    released = False

    async def release() -> None:
        # Called by the generator's end AND as the response's background task: whichever runs first counts.
        nonlocal released
        if not released:
            released = True
            limiter.release(key)

    async def stream() -> AsyncIterator[dict[str, Any]]:
        try:
            async for event in changes(tail, match, after_id=after_id):
                yield event
        finally:
            await release()

    return EventSourceResponse(
        stream(),
        ping=PING_SECONDS,
        background=BackgroundTask(release),
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
