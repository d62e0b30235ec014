"""Append to the change feed; on PostgreSQL also NOTIFY listeners (which only wakes them). Reads: app.feed.queries."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.db import dialect_of
from app.feed.models import ChangeFeedEntry

NOTIFY_CHANNEL = "recovery_feed"
# Any constant works; it serialises feed writers so that ids become visible in increasing order.
_FEED_LOCK_KEY = 0x5245434F


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
) -> ChangeFeedEntry:
    """Append one entry in the caller's transaction; it becomes visible when that commits."""
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
) -> ChangeFeedEntry:
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
