"""Write audit events (each also a change-feed entry); app.audit.queries reads them."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.audit.models import AuditEvent
from app.feed import service as feed
from app.infra.db import utcnow
from app.infra.sql import insert_rows

COMPONENTS = ("collector", "watcher", "job_manager", "advisor", "controller", "watchdog", "api", "observer")
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
MAX_MESSAGE = 4000
# session.info key of the events queued while batched() is open, each with its queued feed entry
_QUEUE = "recovery.audit.queue"


@contextlib.asynccontextmanager
async def batched(session: AsyncSession) -> AsyncIterator[None]:
    """Queue the block's audit events and change-feed entries; write them at its end, in order, in multi-row inserts.

    Inside, record() and app.feed.service.append() return None instead of a row. The ids (and so the
    order readers see) are those one-by-one writes would have given; nested blocks join the outer one.
    """
    if _QUEUE in session.info:
        yield
        return
    events: list[tuple[dict[str, Any], dict[str, Any]]] = []
    entries: list[dict[str, Any]] = []
    session.info[_QUEUE], session.info[feed.QUEUE] = events, entries
    try:
        await feed.lock_first(session)
        yield
        if events:
            ids = await insert_rows(session, AuditEvent, [event for event, _ in events])
            for (_, entry), event_id in zip(events, ids, strict=True):
                entry["entity_id"] = event_id
        await feed.append_many(session, entries=entries)
    finally:
        session.info.pop(_QUEUE, None)
        session.info.pop(feed.QUEUE, None)
        feed.forget_lock(session)


async def record(
    session: AsyncSession,
    *,
    component: str,
    event_type: str,
    message: str,
    level: str = "INFO",
    payload: dict[str, Any] | None = None,
    cluster: str | None = None,
    slurm_job_id: int | None = None,
    attempt_index: int | None = None,
    workflow_id: int | None = None,
    actor: str | None = None,
    produced_at: dt.datetime | None = None,
) -> AuditEvent | None:
    """Record one audit event and its change-feed entry in the caller's transaction (None: queued, see batched)."""
    if level not in LEVELS:
        raise ValueError(f"unknown audit level {level!r}")
    now = utcnow()
    values = {
        "component": component,
        "event_type": event_type,
        "level": level,
        "message": message[:MAX_MESSAGE],
        "payload": payload or {},
        "cluster": cluster,
        "slurm_job_id": slurm_job_id,
        "attempt_index": attempt_index,
        "workflow_id": workflow_id,
        "actor": actor,
        "produced_at": produced_at or now,
        "recorded_at": now,
    }
    queue = session.info.get(_QUEUE)
    if queue is not None:
        await feed.append(session, topic="audit", **_feed_scope(values))  # queued: its entity id comes at the end
        queue.append((values, session.info[feed.QUEUE][-1]))
        return None
    event = AuditEvent(**values)
    session.add(event)
    await session.flush()
    await feed.append(
        session,
        topic="audit",
        entity_id=event.id,
        cluster=cluster,
        workflow_id=workflow_id,
        slurm_job_id=slurm_job_id,
        attempt_index=attempt_index,
        payload={"component": component, "eventType": event_type, "level": level},
    )
    return event


def _feed_scope(values: dict[str, Any]) -> dict[str, Any]:
    """The change-feed fields of an audit event's entry (its entity id aside)."""
    return {
        "cluster": values["cluster"],
        "workflow_id": values["workflow_id"],
        "slurm_job_id": values["slurm_job_id"],
        "attempt_index": values["attempt_index"],
        "payload": {"component": values["component"], "eventType": values["event_type"], "level": values["level"]},
    }
