"""Append to the change feed; on PostgreSQL also NOTIFY listeners (which only wakes them). Reads: app.feed.queries."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.feed.models import ChangeFeedEntry
from app.infra.db import dialect_of, utcnow
from app.infra.sql import insert_rows

NOTIFY_CHANNEL = "recovery_feed"
# Any constant works; it serialises feed writers so that ids become visible in increasing order.
_FEED_LOCK_KEY = 0x5245434F
# session.info key set while this session's transaction holds the feed lock (see lock_first)
_LOCKED = "recovery.feed.locked"
# session.info key of the entries queued while app.audit.service.batched() is open (None: write at once)
QUEUE = "recovery.feed.queue"


async def append(
    session: AsyncSession,
    *,
    topic: str,
    entity_id: int | None = None,
    cluster: str | None = None,
    workflow_id: int | None = None,
    slurm_job_id: int | None = None,
    attempt_index: int | None = None,
    payload: dict[str, Any] | None = None,
) -> ChangeFeedEntry | None:
    """Append one entry in the caller's transaction; it becomes visible when that commits (None: queued)."""
    queue = session.info.get(QUEUE)
    if queue is not None:
        queue.append(
            {
                "topic": topic,
                "entity_id": entity_id,
                "cluster": cluster,
                "workflow_id": workflow_id,
                "slurm_job_id": slurm_job_id,
                "attempt_index": attempt_index,
                "payload": payload or {},
            }
        )
        return None
    if dialect_of(session) == "postgresql":
        # Without this lock a reader could see id 11 committed before id 10 and skip 10 forever.
        await session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _FEED_LOCK_KEY})
    entry = ChangeFeedEntry(
        topic=topic,
        entity_id=entity_id,
        cluster=cluster,
        workflow_id=workflow_id,
        slurm_job_id=slurm_job_id,
        attempt_index=attempt_index,
        payload=payload or {},
    )
    session.add(entry)
    await session.flush()
    if dialect_of(session) == "postgresql":
        await session.execute(text("SELECT pg_notify(:channel, :id)"), {"channel": NOTIFY_CHANNEL, "id": str(entry.id)})
    return entry


async def announce(
    session: AsyncSession,
    *,
    topic: str,
    entity_id: int | None,
    about: Any,
    payload: dict[str, Any] | None = None,
) -> ChangeFeedEntry | None:
    """Append an entry scoped like `about` (a job, attempt, Advice, … row): its cluster, workflow, job and attempt."""
    return await append(
        session,
        topic=topic,
        entity_id=entity_id,
        cluster=getattr(about, "cluster", None),
        workflow_id=getattr(about, "workflow_id", None),
        slurm_job_id=getattr(about, "slurm_job_id", None),
        attempt_index=getattr(about, "attempt_index", None),
        payload=payload,
    )


async def lock_first(session: AsyncSession) -> None:
    """Take the feed's write lock before a batched block writes any row (PostgreSQL; held until commit).

    A block that wrote rows first and took this lock at its end could deadlock with a writer that holds
    the lock and then waits for one of those rows (the collector updating the same attempt)."""
    if dialect_of(session) == "postgresql" and not session.info.get(_LOCKED):
        await session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _FEED_LOCK_KEY})
        session.info[_LOCKED] = True


def forget_lock(session: AsyncSession) -> None:
    """Forget lock_first's mark when its block ends (the lock itself ends with the transaction)."""
    session.info.pop(_LOCKED, None)


async def append_many(session: AsyncSession, *, entries: list[dict[str, Any]]) -> None:
    """Append entries (append()'s fields as dicts) in order, in multi-row inserts, with one NOTIFY."""
    if not entries:
        return
    postgres = dialect_of(session) == "postgresql"
    if postgres and not session.info.get(_LOCKED):
        await session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _FEED_LOCK_KEY})
    now = utcnow()
    for entry in entries:
        entry["created_at"] = now
    last = max(await insert_rows(session, ChangeFeedEntry, entries))
    if postgres:
        await session.execute(text("SELECT pg_notify(:channel, :id)"), {"channel": NOTIFY_CHANNEL, "id": str(last)})
