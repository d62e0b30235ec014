"""Write side of notifications: outbox rows (in the caller's transaction), fan-out to targets, delivery state."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.domain.fleetwide import notify as rules
from app.domain.fleetwide.notify import Target
from app.evidence.models import Anomaly
from app.infra.db import dialect_of, utcnow
from app.notify.models import Notification, NotificationDelivery

PENDING, SENT, DROPPED = "PENDING", "SENT", "DROPPED"
FAN_OUT_BATCH = 500


def attempt_path(slurm_job_id: int | None, attempt_index: int | None) -> str | None:
    """The attempt's dashboard page, relative to the public URL and prefix."""
    if slurm_job_id is None or attempt_index is None:
        return None
    return f"/dashboard/jobs/{slurm_job_id}/attempts/{attempt_index}"


async def record(
    session: AsyncSession,
    *,
    event: str,
    dedup_key: str,
    cluster: str,
    title: str,
    body: str,
    slurm_job_id: int | None = None,
    attempt_index: int | None = None,
    advice_id: int | None = None,
    generation: int | None = None,
) -> bool:
    """Add one notification to the outbox unless its dedup key is there already; True when added."""
    if event not in rules.EVENTS:
        raise ValueError(f"unknown notification event {event!r}")
    values: dict[str, Any] = {
        "dedup_key": dedup_key[:200],
        "event": event,
        "cluster": cluster,
        "slurm_job_id": slurm_job_id,
        "attempt_index": attempt_index,
        "advice_id": advice_id,
        "generation": generation,
        "title": title[:500],
        "body": body[:4000],
        "link_path": attempt_path(slurm_job_id, attempt_index),
        "fanned_out": False,
        "created_at": utcnow(),
    }
    statement: Any
    if dialect_of(session) == "postgresql":
        from sqlalchemy.dialects import postgresql

        statement = (
            postgresql.insert(Notification).values(**values).on_conflict_do_nothing(index_elements=["dedup_key"])
        )
    else:
        from sqlalchemy.dialects import sqlite

        statement = sqlite.insert(Notification).values(**values).on_conflict_do_nothing(index_elements=["dedup_key"])
    statement = statement.returning(Notification.id)
    return (await session.scalar(statement)) is not None


def _where(advice: Any) -> str:
    return f"job {advice.slurm_job_id} attempt {advice.attempt_index} on cluster {advice.cluster}"


async def _about(session: AsyncSession, advice: Any, *, event: str, key: str, title: str, body: str) -> bool:
    """One notification about an Advice (its job, attempt and generation), deduplicated by `event:key`."""
    return await record(
        session,
        event=event,
        dedup_key=f"{event}:{key}",
        cluster=advice.cluster,
        title=title,
        body=body,
        slurm_job_id=advice.slurm_job_id,
        attempt_index=advice.attempt_index,
        advice_id=advice.id,
        generation=advice.generation,
    )


async def _evidence_line(session: AsyncSession, advice: Any) -> str:
    """ "Evidence: ..." for the anomaly the Advice was decided on (its root cause), or nothing."""
    anomaly_id = getattr(advice, "anomaly_id", None)
    anomaly = await session.get(Anomaly, anomaly_id) if anomaly_id is not None else None
    if anomaly is None:
        return ""
    where = f" on {anomaly.node}" if anomaly.node else ""
    place = f" at {(anomaly.log_path or '').rsplit('/', 1)[-1]}:{anomaly.line_number}" if anomaly.line_number else ""
    fingerprint = (anomaly.details or {}).get("fingerprint")
    line = (anomaly.line or "").strip()[:300]
    return (
        f"Evidence: {anomaly.kind} {anomaly.category}{where}{place}"
        + (f" (fingerprint {fingerprint})" if fingerprint else "")
        + (f": {line}" if line else "")
        + "\n"
    )


async def advice_decided(session: AsyncSession, *, advice: Any) -> bool:
    """A new Advice generation: TERMINATE (stopped for good) or RESTART; once per generation."""
    event = rules.TERMINATE if advice.operation == "TERMINATE" else rules.RESTART
    excluded = f", excluding {', '.join(advice.exclusions)}" if advice.exclusions else ""
    verb = "will be stopped for good" if event == rules.TERMINATE else "will be restarted"
    return await _about(
        session,
        advice,
        event=event,
        key=f"{advice.id}:{advice.generation}",
        title=f"Recovery: {_where(advice)} {verb}",
        body=(
            f"What happened: {advice.reason}\n"
            + await _evidence_line(session, advice)
            + f"Decided: {advice.operation}{excluded} (Advice {advice.id} generation {advice.generation}, "
            f"mode {advice.mode}{': ' + advice.mode_reason if advice.mode_reason else ''})"
        ),
    )


async def advice_abandoned(session: AsyncSession, *, advice: Any, reason: str | None, message: str) -> bool:
    """Reconciliation gave up on an Advice generation (ABANDONED): once per generation."""
    return await _about(
        session,
        advice,
        event=rules.ABANDONED,
        key=f"{advice.id}:{advice.generation}",
        title=f"Recovery: gave up on {_where(advice)} ({reason or 'abandoned'})",
        body=(
            f"What happened: {message}\n"
            f"Decided: {advice.operation} was ABANDONED ({reason or 'no reason'}); "
            f"Advice {advice.id} generation {advice.generation}. The job needs a person."
        ),
    )


async def watchdog_released(session: AsyncSession, *, advice: Any, action_id: int, detail: str) -> bool:
    """The watchdog released a hold our requeue left: once per release action."""
    return await _about(
        session,
        advice,
        event=rules.WATCHDOG_RELEASE,
        key=f"{advice.id}:{action_id}",
        title=f"Recovery watchdog released the hold on {_where(advice)}",
        body=(
            f"What happened: {detail}\n"
            f"Decided: released the job (scontrol release) so it is not left held; "
            f"Advice {advice.id} generation {advice.generation}."
        ),
    )


async def fan_out(session: AsyncSession, *, cluster: str, targets: Sequence[Target]) -> int:
    """Give new outbox rows of the cluster one delivery per target that wants their event; returns rows fanned out."""
    rows = (
        await session.scalars(
            select(Notification)
            .where(Notification.fanned_out.is_(False), Notification.cluster == cluster)
            .order_by(Notification.id)
            .limit(FAN_OUT_BATCH)
        )
    ).all()
    now = utcnow()
    for row in rows:
        for target in targets:
            if target.wants(row.event):
                session.add(
                    NotificationDelivery(
                        notification_id=row.id,
                        target=target.key,
                        cluster=row.cluster,
                        slurm_job_id=row.slurm_job_id,
                        status=PENDING,
                        tries=0,
                        next_try_at=now,
                        created_at=now,
                    )
                )
        row.fanned_out = True
    await session.flush()
    return len(rows)


async def mark_sent(session: AsyncSession, *, delivery_id: int, now: dt.datetime | None = None) -> None:
    """The target accepted the message."""
    await session.execute(
        update(NotificationDelivery)
        .where(NotificationDelivery.id == delivery_id)
        .values(status=SENT, sent_at=now or utcnow(), last_error=None)
    )


async def mark_failed(
    session: AsyncSession, *, delivery_id: int, tries: int, error: str, retry_at: dt.datetime
) -> None:
    """The target refused or was unreachable: count the try and wait until `retry_at`."""
    await session.execute(
        update(NotificationDelivery)
        .where(NotificationDelivery.id == delivery_id)
        .values(tries=tries, last_error=error[:2000], next_try_at=retry_at)
    )


async def drop_unconfigured(session: AsyncSession, *, cluster: str, keep: Sequence[str]) -> int:
    """Deliveries to targets no longer configured will never be tried again: mark them DROPPED; returns how many."""
    result = await session.execute(
        update(NotificationDelivery)
        .where(
            NotificationDelivery.status == PENDING,
            NotificationDelivery.cluster == cluster,
            NotificationDelivery.target.not_in(list(keep)),
        )
        .values(status=DROPPED, last_error="target no longer configured")
    )
    return int(getattr(result, "rowcount", 0) or 0)
