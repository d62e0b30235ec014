"""Read side of Advice and its reconciliation milestones (shared by API, dashboard and worker)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import and_, case, distinct, exists, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from app.advice.models import Advice, SchedulerAction
from app.audit.models import AuditEvent
from app.domain.admission.mode import ENROLLED
from app.domain.control import states
from app.domain.fleetwide.trust import HOLD_REASONS
from app.domain.presentation.story import OUTCOMES, Outcome
from app.evidence.models import Anomaly
from app.evidence.queries import DECIDED_KINDS
from app.infra.db import dialect_of
from app.infra.pagination import Page, PageRequest, paginate
from app.jobs.models import Attempt, Job, Workflow
from app.jobs.queries import WorkflowFilter, page_of_workflows, workflow_query


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
    return await paginate(session, query, kind="advice", columns=(Advice.id,), descending=True, request=page)


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
    """The current Advice of each attempt that has one (newer decisions bump its generation; one decided again
    supersedes the first)."""
    if not attempt_ids:
        return {}
    query = select(Advice).where(Advice.attempt_id.in_(list(set(attempt_ids))), Advice.superseded_by_id.is_(None))
    rows = (await session.scalars(query)).all()
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
    """The current Advice of an attempt, if any (not one an operator's "decide again now" superseded)."""
    return await session.scalar(
        select(Advice).where(Advice.attempt_id == attempt_id, Advice.superseded_by_id.is_(None))
    )


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
        .outerjoin(Advice, (Advice.attempt_id == Attempt.id) & Advice.superseded_by_id.is_(None))
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
        Job.enrolment == ENROLLED,
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


# ---- the Overview's outcome, facets and "had a failure" ---------------------------------------------


@dataclass(frozen=True)
class OverviewFilter:
    """Filters of the Overview beyond the workflow columns: outcome, anomaly category, Advice rule, had a failure."""

    outcome: str | None = None
    category: str | None = None
    rule: str | None = None
    had_failure: bool = False


@dataclass(frozen=True)
class Facets:
    """Counts of matching workflows by outcome, by anomaly category and by Advice rule (each without its own filter)."""

    outcomes: dict[str, int]
    categories: dict[str, int]
    rules: dict[str, int]


_STOPPED_STATES = sorted(states.FAILED | {"CANCELLED"})


def _headline_advice() -> tuple[Any, Any]:
    """(joined selectable, Advice alias): each workflow's newest job and that job's newest Advice (outer joins)."""
    latest_job = (
        select(Job.workflow_id.label("workflow_id"), func.max(Job.id).label("job_id"))
        .where(Job.workflow_id.is_not(None))
        .group_by(Job.workflow_id)
        .subquery()
    )
    latest_advice = (
        select(Advice.job_id.label("job_id"), func.max(Advice.id).label("advice_id")).group_by(Advice.job_id).subquery()
    )
    headline = aliased(Advice)
    joined = (
        Workflow.__table__.outerjoin(latest_job, latest_job.c.workflow_id == Workflow.id)
        .outerjoin(latest_advice, latest_advice.c.job_id == latest_job.c.job_id)
        .outerjoin(headline, headline.id == latest_advice.c.advice_id)
    )
    return joined, headline


def workflow_outcome(headline: Any) -> Any:
    """The outcome of a workflow in SQL, by the rule of app.domain.presentation.story.tell on its headline attempt."""
    none = headline.id.is_(None)
    return case(
        (and_(none, Workflow.latest_state == "COMPLETED"), Outcome.COMPLETED.value),
        (and_(none, Workflow.latest_state.in_(_STOPPED_STATES)), Outcome.STOPPED.value),
        (none, Outcome.RUNNING.value),
        (headline.mode == "observe", Outcome.OBSERVE_ONLY.value),
        (headline.review == "VETOED", Outcome.STOPPED.value),
        (headline.operation == "TERMINATE", Outcome.STOPPED.value),
        (headline.disposition == "ABANDONED", Outcome.STOPPED.value),
        # a restart held for an operator is not a recovery yet (app.domain.presentation.story.tell: "held by …")
        (
            and_(
                headline.active.is_(True),
                headline.disposition == "PENDING",
                headline.disposition_reason.in_(HOLD_REASONS),
            ),
            Outcome.RUNNING.value,
        ),
        else_=Outcome.RECOVERED.value,
    )


def _had_failure() -> Any:
    """A failed attempt, any Advice, or a crash or hang detected (a hang Slurm requeued by itself counts too)."""
    # Uncorrelated IN sets: each is computed once (a correlated EXISTS per workflow is slow on SQLite).
    advised = select(Job.workflow_id).join(Advice, Advice.job_id == Job.id).where(Job.workflow_id.is_not(None))
    detected = (
        select(Attempt.workflow_id)
        .join(Anomaly, Anomaly.attempt_id == Attempt.id)
        .where(Attempt.workflow_id.is_not(None), Anomaly.kind.in_(("CRASH", "NO_PROGRESS")))
    )
    return or_(Workflow.failed_attempt_count > 0, Workflow.id.in_(advised), Workflow.id.in_(detected))


def _matching_ids(base: Any, flt: OverviewFilter, *, skip: str = "") -> Any:
    """SELECT of the ids of workflows matching `base` (jobs.queries.workflow_query) and `flt`, but for `skip`."""
    query = select(Workflow.id)
    if flt.outcome and skip != "outcome":
        joined, headline = _headline_advice()
        query = query.select_from(joined).where(workflow_outcome(headline) == flt.outcome)
    if base.whereclause is not None:
        query = query.where(base.whereclause)
    if flt.had_failure:
        query = query.where(_had_failure())
    if flt.category and skip != "category":
        anomalies = (
            select(Attempt.workflow_id)
            .join(Anomaly, Anomaly.attempt_id == Attempt.id)
            .where(Attempt.workflow_id.is_not(None), Anomaly.category == flt.category)
        )
        query = query.where(Workflow.id.in_(anomalies))
    if flt.rule and skip != "rule":
        rules = select(Job.workflow_id).join(Advice, Advice.job_id == Job.id).where(Advice.rule == flt.rule)
        query = query.where(Workflow.id.in_(rules))
    return query


def _active(flt: OverviewFilter) -> bool:
    return bool(flt.outcome or flt.category or flt.rule or flt.had_failure)


async def list_overview(
    session: AsyncSession, *, workflows: WorkflowFilter, overview: OverviewFilter, page: PageRequest
) -> Page[Workflow]:
    """One page of the Overview: workflows matching both filters, most recently updated first."""
    if workflows.failed_only:  # "failed only" means "had a failure" (a requeued hang too), decided here
        workflows, overview = replace(workflows, failed_only=False), replace(overview, had_failure=True)
    base = workflow_query(workflows)
    query = select(Workflow).where(Workflow.id.in_(_matching_ids(base, overview))) if _active(overview) else base
    return await page_of_workflows(session, query=query, page=page)


async def overview_facets(
    session: AsyncSession, *, workflows: WorkflowFilter, overview: OverviewFilter, top: int = 12
) -> Facets:
    """How many matching workflows have each outcome, anomaly category and Advice rule: three statements."""
    if workflows.failed_only:
        workflows, overview = replace(workflows, failed_only=False), replace(overview, had_failure=True)
    base = workflow_query(workflows)
    joined, headline = _headline_advice()
    outcome = workflow_outcome(headline)
    rows = await session.execute(
        select(outcome, func.count())
        .select_from(joined)
        .where(Workflow.id.in_(_matching_ids(base, overview, skip="outcome")))
        .group_by(outcome)
    )
    outcomes = {o: 0 for o in OUTCOMES}
    outcomes.update({str(name): int(n) for name, n in rows.all()})
    category_count = func.count(distinct(Attempt.workflow_id))
    categories = await session.execute(
        select(Anomaly.category, category_count)
        .join(Attempt, Attempt.id == Anomaly.attempt_id)
        .where(Attempt.workflow_id.in_(_matching_ids(base, overview, skip="category")))
        .group_by(Anomaly.category)
        .order_by(category_count.desc(), Anomaly.category)
        .limit(top)
    )
    rule_count = func.count(distinct(Job.workflow_id))
    rules = await session.execute(
        select(Advice.rule, rule_count)
        .join(Job, Job.id == Advice.job_id)
        .where(Advice.rule.is_not(None), Job.workflow_id.in_(_matching_ids(base, overview, skip="rule")))
        .group_by(Advice.rule)
        .order_by(rule_count.desc(), Advice.rule)
        .limit(top)
    )
    return Facets(
        outcomes=outcomes,
        categories={str(c): int(n) for c, n in categories.all()},
        rules={str(r): int(n) for r, n in rules.all()},
    )


async def outcomes_of_workflows(session: AsyncSession, *, workflow_ids: Sequence[int]) -> dict[int, str]:
    """The outcome of each workflow (the Overview's column), in one statement."""
    if not workflow_ids:
        return {}
    joined, headline = _headline_advice()
    rows = await session.execute(
        select(Workflow.id, workflow_outcome(headline)).select_from(joined).where(Workflow.id.in_(list(workflow_ids)))
    )
    return {wid: str(outcome) for wid, outcome in rows.all()}


async def previous_checkpoint_check(session: AsyncSession, *, job_id: int, attempt_index: int) -> dict[str, Any] | None:
    """The checkpoint check stored on the job's newest earlier Advice that has one (to compare "newer")."""
    query = (
        select(Advice.checkpoint_check)
        .where(Advice.job_id == job_id, Advice.attempt_index < attempt_index, Advice.checkpoint_check.is_not(None))
        .order_by(Advice.attempt_index.desc())
        .limit(1)
    )
    return (await session.scalars(query)).first()


async def singleton_predecessor(session: AsyncSession, *, cluster: str, slurm_job_id: int) -> int | None:
    """The job record whose Advice released this Slurm job as its singleton twin (None: not a released twin)."""
    query = (
        select(Advice.job_id)
        .where(Advice.cluster == cluster, Advice.successor_job_id == slurm_job_id)
        .order_by(Advice.id.desc())
        .limit(1)
    )
    return (await session.scalars(query)).first()
