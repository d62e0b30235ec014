"""Write audit events (each also a change-feed entry); app.audit.queries reads them."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.audit.models import AuditEvent
from app.db import utcnow
from app.feed import service as feed

COMPONENTS = ("collector", "watcher", "job_manager", "advisor", "controller", "watchdog", "api", "observer")
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
MAX_MESSAGE = 4000


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
