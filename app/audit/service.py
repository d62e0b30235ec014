"""Write audit events (each also a change-feed entry) and query them with SPEC §7 filters."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.audit.models import AuditEvent
from app.db import utcnow
from app.feed import service as feed
from app.pagination import Page, PageRequest, paginate

COMPONENTS = ("collector", "watcher", "job_manager", "advisor", "controller", "watchdog", "api", "observer")
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
MAX_MESSAGE = 4000
TIMELINE_EVENT_TYPES = ("attempt.registered", "attempt.state_changed")
VERIFICATION_PREFIX = "reconciliation."
MAX_TIMELINE_EVENTS = 2000


class AuditFilterError(ValueError):
    """An audit query filter that cannot be applied (unknown level, bad attempt reference, …)."""


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
) -> AuditEvent:
    """Record one audit event and its change-feed entry in the caller's transaction."""
    if level not in LEVELS:
        raise ValueError(f"unknown audit level {level!r}")
    event = AuditEvent(
        component=component,
        event_type=event_type,
        level=level,
        message=message[:MAX_MESSAGE],
        payload=payload or {},
        cluster=cluster,
        slurm_job_id=slurm_job_id,
        attempt_index=attempt_index,
        workflow_id=workflow_id,
        actor=actor,
        produced_at=produced_at or utcnow(),
        recorded_at=utcnow(),
    )
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


@dataclass(frozen=True)
class AuditFilter:
    """SPEC §7 filters; every field is optional and they combine with AND."""

    slurm_job_id: int | None = None
    attempt_index: int | None = None
    component: str | None = None
    event_type: str | None = None
    level: str | None = None
    produced_after: dt.datetime | None = None
    produced_before: dt.datetime | None = None
    cluster: str | None = None
    workflow_id: int | None = None

    def __post_init__(self) -> None:
        if self.level is not None and self.level not in LEVELS:
            raise AuditFilterError(f"level must be one of {', '.join(LEVELS)}")
        if self.attempt_index is not None and self.slurm_job_id is None:
            raise AuditFilterError("an attempt index needs a job id")
        if self.attempt_index is not None and self.attempt_index < 0:
            raise AuditFilterError("attempt index must not be negative")


def parse_job_reference(text: str) -> tuple[int, int | None]:
    """Parse the dashboard's job box: `12345` (all attempts) or `12345/0` (one attempt)."""
    raw = text.strip()
    job, sep, attempt = raw.partition("/")
    if not job.isdigit() or (sep and not attempt.isdigit()):
        raise AuditFilterError(f"expected a job id or job_id/attempt_index, got {raw[:40]!r}")
    return int(job), (int(attempt) if sep else None)


def _filtered(query: Any, flt: AuditFilter) -> Any:
    if flt.slurm_job_id is not None:
        query = query.where(AuditEvent.slurm_job_id == flt.slurm_job_id)
    if flt.attempt_index is not None:
        query = query.where(AuditEvent.attempt_index == flt.attempt_index)
    if flt.component:
        query = query.where(AuditEvent.component == flt.component)
    if flt.event_type:
        query = query.where(AuditEvent.event_type == flt.event_type)
    if flt.level:
        query = query.where(AuditEvent.level == flt.level)
    if flt.produced_after:
        query = query.where(AuditEvent.produced_at >= flt.produced_after)
    if flt.produced_before:
        query = query.where(AuditEvent.produced_at < flt.produced_before)
    if flt.cluster:
        query = query.where(AuditEvent.cluster == flt.cluster)
    if flt.workflow_id is not None:
        query = query.where(AuditEvent.workflow_id == flt.workflow_id)
    return query


async def query(
    session: AsyncSession,
    *,
    filter: AuditFilter,
    page: PageRequest,
    descending: bool = True,
) -> Page[AuditEvent]:
    """One keyset page of matching events ordered by (produced_at, id)."""
    return await paginate(
        session,
        _filtered(select(AuditEvent), filter),
        kind="audit",
        columns=(AuditEvent.produced_at, AuditEvent.id),
        descending=descending,
        request=page,
        key_of=lambda e: (e.produced_at, e.id),
    )


async def get(session: AsyncSession, *, event_id: int) -> AuditEvent | None:
    """One event by id."""
    return await session.get(AuditEvent, event_id)


async def events_by_ids(session: AsyncSession, *, ids: Sequence[int]) -> dict[int, AuditEvent]:
    """Events by id, in one statement (the API's node loader batches through it)."""
    if not ids:
        return {}
    rows = (await session.scalars(select(AuditEvent).where(AuditEvent.id.in_(list(set(ids)))))).all()
    return {row.id: row for row in rows}


async def timeline_events(
    session: AsyncSession, *, cluster: str, slurm_job_id: int, since: dt.datetime | None = None
) -> list[AuditEvent]:
    """A job's state changes and reconciliation verdicts (oldest first) for the timeline, bounded in number."""
    query = select(AuditEvent).where(
        AuditEvent.slurm_job_id == slurm_job_id,
        or_(AuditEvent.cluster == cluster, AuditEvent.cluster.is_(None)),
        or_(AuditEvent.event_type.in_(TIMELINE_EVENT_TYPES), AuditEvent.event_type.like(VERIFICATION_PREFIX + "%")),
    )
    if since is not None:
        # A reused Slurm job id must not lend its old history to the new job record.
        query = query.where(AuditEvent.produced_at >= since)
    query = query.order_by(AuditEvent.produced_at, AuditEvent.id).limit(MAX_TIMELINE_EVENTS)
    return list((await session.scalars(query)).all())
