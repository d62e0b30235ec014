"""Read side of Advice and its reconciliation milestones (shared by API, dashboard and worker)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import and_, exists, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.advice.models import Advice, SchedulerAction
from app.audit.models import AuditEvent
from app.db import dialect_of
from app.domain import states
from app.evidence.models import Anomaly
from app.evidence.queries import DECIDED_KINDS
from app.jobs.models import Attempt, Job
from app.pagination import Page, PageRequest, paginate


@dataclass(frozen=True)
class AdviceFilter:
    """Advice list filters; `only_active` keeps Advice that may still need reconciliation."""

    only_active: bool = False
    slurm_job_id: int | None = None
    cluster: str | None = None
    workflow_id: int | None = None


async def list_advice(session: AsyncSession, *, filter: AdviceFilter, page: PageRequest) -> Page[Advice]:
    """One page of Advice, newest first."""
    query = select(Advice)
    if filter.only_active:
        query = query.where(Advice.active.is_(True))
    if filter.cluster:
        query = query.where(Advice.cluster == filter.cluster)
    if filter.slurm_job_id is not None or filter.workflow_id is not None:
        # Through the job records, so the (job_id, id) index serves the page.
        jobs = select(Job.id)
        if filter.slurm_job_id is not None:
            jobs = jobs.where(Job.slurm_job_id == filter.slurm_job_id)
        if filter.workflow_id is not None:
            jobs = jobs.where(Job.workflow_id == filter.workflow_id)
        query = query.where(Advice.job_id.in_(jobs.scalar_subquery()))
    return await paginate(
        session, query, kind="advice", columns=(Advice.id,), descending=True, request=page, key_of=lambda a: (a.id,)
    )


async def get_advice(session: AsyncSession, *, advice_id: int) -> Advice | None:
    """One Advice by id."""
    return await session.get(Advice, advice_id)


async def advice_by_ids(session: AsyncSession, *, ids: Sequence[int]) -> dict[int, Advice]:
    """Advice by id, in one statement."""
    if not ids:
        return {}
    rows = (await session.scalars(select(Advice).where(Advice.id.in_(list(set(ids)))))).all()
    return {row.id: row for row in rows}


async def advice_of_attempts(session: AsyncSession, *, attempt_ids: Sequence[int]) -> dict[int, Advice]:
    """The Advice of each attempt that has one (at most one per attempt; newer decisions bump its generation)."""
    if not attempt_ids:
        return {}
    rows = (await session.scalars(select(Advice).where(Advice.attempt_id.in_(list(set(attempt_ids)))))).all()
    return {row.attempt_id: row for row in rows}


async def milestones_of_advice(session: AsyncSession, *, advice_ids: Sequence[int]) -> dict[int, list[SchedulerAction]]:
    """Each Advice's scheduler actions (milestones) in the order they were taken, in one statement."""
    result: dict[int, list[SchedulerAction]] = {advice_id: [] for advice_id in advice_ids}
    if not advice_ids:
        return result
    query = (
        select(SchedulerAction)
        .where(SchedulerAction.advice_id.in_(list(set(advice_ids))))
        .order_by(SchedulerAction.advice_id, SchedulerAction.id)
    )
    for row in (await session.scalars(query)).all():
        result[row.advice_id].append(row)
    return result


async def advice_for_attempt(session: AsyncSession, *, attempt_id: int) -> Advice | None:
    """The one Advice of an attempt, if any."""
    return await session.scalar(select(Advice).where(Advice.attempt_id == attempt_id))


async def not_needed_recorded(session: AsyncSession, *, attempt: Attempt) -> bool:
    """True when this attempt already has its `advice.not_needed` event (it is written once per attempt)."""
    rows = (
        await session.scalars(
            select(AuditEvent.payload).where(
                AuditEvent.slurm_job_id == attempt.slurm_job_id,
                AuditEvent.attempt_index == attempt.attempt_index,
                AuditEvent.event_type == "advice.not_needed",
                AuditEvent.cluster == attempt.cluster,
            )
        )
    ).all()
    return any((payload or {}).get("attemptId") == attempt.id for payload in rows)


async def lock_advice(session: AsyncSession, *, advice_id: int) -> Advice | None:
    """One Advice read afresh and, on PostgreSQL, locked for the rest of the transaction."""
    return await session.get(
        Advice, advice_id, with_for_update=dialect_of(session) == "postgresql", populate_existing=True
    )


async def get_action(session: AsyncSession, *, action_id: int) -> SchedulerAction | None:
    """One scheduler action (milestone) by id."""
    return await session.get(SchedulerAction, action_id)


async def action_recorded(session: AsyncSession, *, key: str) -> bool:
    """True when a scheduler action with this idempotency key exists."""
    return await session.scalar(select(SchedulerAction.id).where(SchedulerAction.idempotency_key == key)) is not None


async def due_advice_ids(
    session: AsyncSession, *, cluster: str, now: dt.datetime, vetoed: str, limit: int
) -> list[int]:
    """Ids of active, not vetoed Advice on this cluster whose next look is due, oldest first."""
    query = (
        select(Advice.id)
        .where(Advice.active.is_(True), Advice.cluster == cluster)
        .where(or_(Advice.next_reconcile_at.is_(None), Advice.next_reconcile_at <= now))
        .where(or_(Advice.review.is_(None), Advice.review != vetoed))
        .order_by(Advice.id)
        .limit(limit)
    )
    return list((await session.scalars(query)).all())


async def advice_with_step(
    session: AsyncSession, *, cluster: str, step: str, statuses: Sequence[str]
) -> list[tuple[Advice, str | None]]:
    """(Advice, its job's state) of this cluster's live jobs whose Advice has a milestone of `step` in `statuses`."""
    with_step = select(SchedulerAction.advice_id).where(
        SchedulerAction.step == step, SchedulerAction.status.in_(list(statuses))
    )
    rows = await session.execute(
        select(Advice, Job.state)
        .join(Job, Job.id == Advice.job_id)
        .where(Advice.id.in_(with_step), Advice.cluster == cluster, Job.retired_at.is_(None))
    )
    return [(advice, state) for advice, state in rows.all()]


async def active_advice_of_workflows(session: AsyncSession, *, workflow_ids: Sequence[int]) -> dict[int, list[Advice]]:
    """Each workflow's active Advice, newest first, in one statement."""
    result: dict[int, list[Advice]] = {wid: [] for wid in workflow_ids}
    if not workflow_ids:
        return result
    rows = await session.execute(
        select(Advice, Job.workflow_id)
        .join(Job, Job.id == Advice.job_id)
        .where(Job.workflow_id.in_(list(set(workflow_ids))), Advice.active.is_(True))
        .order_by(Advice.id.desc())
    )
    for advice, workflow_id in rows.all():
        if workflow_id is not None:
            result[workflow_id].append(advice)
    return result


async def advice_ids_of_attempts(
    session: AsyncSession, *, attempt_ids: Sequence[int]
) -> list[tuple[int, str, int | None]]:
    """(attempt id, its state, its Advice id or None) for these attempts."""
    if not attempt_ids:
        return []
    rows = await session.execute(
        select(Attempt.id, Attempt.state, Advice.id)
        .outerjoin(Advice, Advice.attempt_id == Attempt.id)
        .where(Attempt.id.in_(list(attempt_ids)))
    )
    return [(attempt_id, state, advice_id) for attempt_id, state, advice_id in rows.all()]


@dataclass(frozen=True)
class Undecided:
    """What the advisor missed while none ran: attempts to (re)decide and (anomaly id, attempt id) pairs."""

    attempt_ids: list[int]
    anomalies: list[tuple[int, int]]


async def undecided(session: AsyncSession, *, cluster: str) -> Undecided:
    """Failed attempts with neither Advice nor an `advice.not_needed` event, attempts with active Advice, and
    anomalies of attempts still running or not yet decided (enrolled, live jobs of this cluster; never adopted ones)."""
    has_advice = exists().where(Advice.attempt_id == Attempt.id)
    not_needed = exists().where(
        AuditEvent.slurm_job_id == Attempt.slurm_job_id,
        AuditEvent.attempt_index == Attempt.attempt_index,
        AuditEvent.event_type == "advice.not_needed",
        AuditEvent.cluster == Attempt.cluster,
    )
    active_advice = exists().where(Advice.attempt_id == Attempt.id, Advice.active.is_(True))
    enrolled = and_(
        Job.id == Attempt.job_id,
        Job.enrolment == "ENROLLED",
        Job.retired_at.is_(None),
        Job.cluster == cluster,
        Attempt.adopted_at.is_(None),  # adopted attempts are history, never decided
    )
    failed = (
        select(Attempt.id)
        .join(Job, enrolled)
        .where(or_(and_(Attempt.state.in_(states.RETRYABLE_FAILED), ~has_advice, ~not_needed), active_advice))
    )
    attempt_ids = list((await session.scalars(failed)).all())
    query = (
        select(Anomaly.id, Anomaly.attempt_id)
        .join(Attempt, Attempt.id == Anomaly.attempt_id)
        .join(Job, enrolled)
        .where(
            Anomaly.kind.in_(DECIDED_KINDS),
            or_(Attempt.state.in_(states.ACTIVE), active_advice, and_(~has_advice, ~not_needed)),
        )
        .order_by(Anomaly.id)
    )
    anomalies = [(anomaly_id, attempt_id) for anomaly_id, attempt_id in (await session.execute(query)).all()]
    return Undecided(attempt_ids=attempt_ids, anomalies=anomalies)


async def active_counts(session: AsyncSession, *, cluster: str) -> dict[str, int]:
    """How many Advice of the cluster are still active, by operation (for the active-Advice gauge)."""
    rows = (
        await session.execute(
            select(Advice.operation, func.count(Advice.id))
            .where(Advice.active.is_(True), Advice.cluster == cluster)
            .group_by(Advice.operation)
        )
    ).all()
    return {str(operation): int(count) for operation, count in rows}
