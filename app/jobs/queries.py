"""Read side of workflows, jobs, attempts, policies, checkpoints and anomalies (shared by API and dashboard).

List functions take a small frozen filter and a PageRequest and return a keyset Page; the `*_by_*`
functions load many rows in ONE statement (DataLoaders batch through them), so a page of N rows
costs the same number of statements as a page of one. `workflow_summaries` and its neighbours serve
the dashboard's overview on the same terms.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy import func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.advice.models import Advice
from app.domain.identity import parse_attempt_ref
from app.evidence.models import Anomaly, Checkpoint
from app.jobs.models import Attempt, Job, Policy, Workflow
from app.jobs.service import FAILED_STATES
from app.pagination import Page, PageRequest, paginate

R = TypeVar("R")


@dataclass(frozen=True)
class WorkflowFilter:
    """Workflow list filters; `search` matches the workflow key or the latest job name (substring)."""

    cluster: str | None = None
    environment: str | None = None
    state: str | None = None
    search: str | None = None
    failed_only: bool = False


@dataclass(frozen=True)
class JobFilter:
    """Job list filters; `include_retired` also lists superseded incarnations of reused job ids."""

    cluster: str | None = None
    workflow_id: int | None = None
    slurm_job_id: int | None = None
    include_retired: bool = True


@dataclass(frozen=True)
class AttemptFilter:
    """Attempt list filters; `job_id` is the job record's id, `slurm_job_id` Slurm's."""

    cluster: str | None = None
    workflow_id: int | None = None
    job_id: int | None = None
    slurm_job_id: int | None = None
    state: str | None = None
    failed_only: bool = False


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _workflow_query(flt: WorkflowFilter) -> Any:
    query = select(Workflow)
    if flt.cluster:
        query = query.where(Workflow.cluster == flt.cluster)
    if flt.environment:
        query = query.where(Workflow.environment == flt.environment)
    if flt.state:
        query = query.where(Workflow.latest_state == flt.state)
    if flt.failed_only:
        query = query.where(Workflow.failed_attempt_count > 0)
    if flt.search and flt.search.strip():
        pattern = f"%{_escape_like(flt.search.strip().lower())}%"
        query = query.where(
            or_(
                func.lower(Workflow.workflow_key).like(pattern, escape="\\"),
                func.lower(Workflow.latest_job_name).like(pattern, escape="\\"),
            )
        )
    return query


async def list_workflows(session: AsyncSession, *, filter: WorkflowFilter, page: PageRequest) -> Page[Workflow]:
    """One page of workflows, most recently updated first."""
    return await paginate(
        session,
        _workflow_query(filter),
        kind="workflows",
        columns=(Workflow.updated_at, Workflow.id),
        descending=True,
        request=page,
        key_of=lambda w: (w.updated_at, w.id),
    )


async def find_workflow(session: AsyncSession, *, key: str, cluster: str | None = None) -> Workflow | None:
    """The workflow with this key (on `cluster`, or the most recently updated one of that key)."""
    query = select(Workflow).where(Workflow.workflow_key == key)
    if cluster:
        query = query.where(Workflow.cluster == cluster)
    return await session.scalar(query.order_by(Workflow.updated_at.desc(), Workflow.id.desc()).limit(1))


async def workflows_by_ids(session: AsyncSession, *, ids: Sequence[int]) -> dict[int, Workflow]:
    """Workflows by id, in one statement."""
    return await _by_ids(session, Workflow, ids)


async def list_jobs(session: AsyncSession, *, filter: JobFilter, page: PageRequest) -> Page[Job]:
    """One page of job records, newest first."""
    query = select(Job)
    if filter.cluster:
        query = query.where(Job.cluster == filter.cluster)
    if filter.workflow_id is not None:
        query = query.where(Job.workflow_id == filter.workflow_id)
    if filter.slurm_job_id is not None:
        query = query.where(Job.slurm_job_id == filter.slurm_job_id)
    if not filter.include_retired:
        query = query.where(Job.retired_at.is_(None))
    return await paginate(
        session, query, kind="jobs", columns=(Job.id,), descending=True, request=page, key_of=lambda j: (j.id,)
    )


async def find_job(session: AsyncSession, *, slurm_job_id: int, cluster: str | None = None) -> Job | None:
    """The current record of a Slurm job id: the live incarnation, else the newest retired one."""
    query = select(Job).where(Job.slurm_job_id == slurm_job_id)
    if cluster:
        query = query.where(Job.cluster == cluster)
    # Live (retired_at NULL) first; among equals the newest record.
    query = query.order_by(Job.retired_at.is_not(None), Job.id.desc()).limit(1)
    return await session.scalar(query)


async def jobs_by_ids(session: AsyncSession, *, ids: Sequence[int]) -> dict[int, Job]:
    """Job records by id, in one statement."""
    return await _by_ids(session, Job, ids)


async def policies_by_job_ids(session: AsyncSession, *, job_ids: Sequence[int]) -> dict[int, Policy]:
    """The parsed policy of each job, in one statement."""
    if not job_ids:
        return {}
    rows = (await session.scalars(select(Policy).where(Policy.job_id.in_(list(set(job_ids)))))).all()
    return {row.job_id: row for row in rows}


def _attempt_query(flt: AttemptFilter) -> Any:
    query = select(Attempt)
    if flt.cluster:
        query = query.where(Attempt.cluster == flt.cluster)
    if flt.workflow_id is not None:
        query = query.where(Attempt.workflow_id == flt.workflow_id)
    if flt.job_id is not None:
        query = query.where(Attempt.job_id == flt.job_id)
    if flt.slurm_job_id is not None:
        query = query.where(Attempt.slurm_job_id == flt.slurm_job_id)
    if flt.state:
        query = query.where(Attempt.state == flt.state)
    if flt.failed_only:
        query = query.where(Attempt.state.in_(sorted(FAILED_STATES)))
    return query


async def list_attempts(session: AsyncSession, *, filter: AttemptFilter, page: PageRequest) -> Page[Attempt]:
    """One page of attempts, most recently updated first."""
    return await paginate(
        session,
        _attempt_query(filter),
        kind="attempts",
        columns=(Attempt.updated_at, Attempt.id),
        descending=True,
        request=page,
        key_of=lambda a: (a.updated_at, a.id),
    )


async def list_attempts_of_job(session: AsyncSession, *, job_id: int, page: PageRequest) -> Page[Attempt]:
    """One page of a job record's attempts in execution order (attempt 0 first)."""
    return await paginate(
        session,
        select(Attempt).where(Attempt.job_id == job_id),
        kind="job-attempts",
        columns=(Attempt.attempt_index, Attempt.id),
        descending=False,
        request=page,
        key_of=lambda a: (a.attempt_index, a.id),
    )


async def list_attempts_by_slurm_id(
    session: AsyncSession, *, slurm_job_id: int, cluster: str | None = None, page: PageRequest
) -> Page[Attempt]:
    """One page of every attempt recorded under a Slurm job id (all incarnations), oldest first."""
    query = select(Attempt).where(Attempt.slurm_job_id == slurm_job_id)
    if cluster:
        query = query.where(Attempt.cluster == cluster)
    return await paginate(
        session,
        query,
        kind="scheduler-attempts",
        columns=(Attempt.job_id, Attempt.attempt_index, Attempt.id),
        descending=False,
        request=page,
        key_of=lambda a: (a.job_id, a.attempt_index, a.id),
    )


async def count_attempts_of_jobs(session: AsyncSession, *, job_ids: Sequence[int]) -> dict[int, int]:
    """How many attempts each job record has, in one grouped statement."""
    if not job_ids:
        return {}
    rows = await session.execute(
        select(Attempt.job_id, func.count()).where(Attempt.job_id.in_(list(set(job_ids)))).group_by(Attempt.job_id)
    )
    counts = {job_id: 0 for job_id in job_ids}
    counts.update({job_id: int(count) for job_id, count in rows.all()})
    return counts


async def first_attempts_of_jobs(
    session: AsyncSession, *, job_ids: Sequence[int], limit: int
) -> dict[int, list[Attempt]]:
    """The first `limit` attempts (by index) of each job, in one statement."""
    return await _first_per_group(
        session, Attempt, Attempt.job_id, job_ids, (Attempt.attempt_index.asc(), Attempt.id.asc()), limit
    )


async def attempts_by_ids(session: AsyncSession, *, ids: Sequence[int]) -> dict[int, Attempt]:
    """Attempts by id, in one statement."""
    return await _by_ids(session, Attempt, ids)


async def find_attempt(
    session: AsyncSession, *, slurm_job_id: int, attempt_index: int, cluster: str | None = None
) -> Attempt | None:
    """The attempt (job id, index) of the job's current record (see find_job), else of any record."""
    query = (
        select(Attempt)
        .join(Job, Job.id == Attempt.job_id)
        .where(Attempt.slurm_job_id == slurm_job_id, Attempt.attempt_index == attempt_index)
    )
    if cluster:
        query = query.where(Attempt.cluster == cluster)
    return await session.scalar(query.order_by(Job.retired_at.is_not(None), Job.id.desc()).limit(1))


async def find_attempt_by_uuid(session: AsyncSession, *, uuid: str) -> Attempt | None:
    """The attempt with this heimdallJobId."""
    return await session.scalar(select(Attempt).where(Attempt.uuid == uuid.lower()))


async def find_attempt_by_ref(session: AsyncSession, *, ref: str, cluster: str | None = None) -> Attempt | None:
    """The attempt named by "<jobId>-<attemptIndex>", "<jobId>/<attemptIndex>" or its UUID; None if unknown."""
    parsed = parse_attempt_ref(ref)
    if parsed is None:
        raise ValueError(f"not an attempt reference: {ref[:60]!r} (expected <jobId>-<attemptIndex> or a UUID)")
    if parsed.kind == "uuid":
        assert parsed.uuid is not None
        return await find_attempt_by_uuid(session, uuid=parsed.uuid)
    assert parsed.job_id is not None and parsed.attempt_index is not None
    return await find_attempt(session, slurm_job_id=parsed.job_id, attempt_index=parsed.attempt_index, cluster=cluster)


async def latest_checkpoints_of_attempts(
    session: AsyncSession, *, attempt_ids: Sequence[int], limit: int
) -> dict[int, list[Checkpoint]]:
    """The newest `limit` checkpoints of each attempt, in one statement."""
    return await _first_per_group(
        session, Checkpoint, Checkpoint.attempt_id, attempt_ids, (Checkpoint.id.desc(),), limit
    )


async def latest_anomalies_of_attempts(
    session: AsyncSession, *, attempt_ids: Sequence[int], limit: int
) -> dict[int, list[Anomaly]]:
    """The newest `limit` anomalies of each attempt, in one statement."""
    return await _first_per_group(session, Anomaly, Anomaly.attempt_id, attempt_ids, (Anomaly.id.desc(),), limit)


async def list_checkpoints(session: AsyncSession, *, attempt_id: int, page: PageRequest) -> Page[Checkpoint]:
    """One page of an attempt's checkpoints, newest first."""
    return await paginate(
        session,
        select(Checkpoint).where(Checkpoint.attempt_id == attempt_id),
        kind="checkpoints",
        columns=(Checkpoint.id,),
        descending=True,
        request=page,
        key_of=lambda c: (c.id,),
    )


async def list_anomalies(session: AsyncSession, *, attempt_id: int, page: PageRequest) -> Page[Anomaly]:
    """One page of an attempt's anomalies, newest first."""
    return await paginate(
        session,
        select(Anomaly).where(Anomaly.attempt_id == attempt_id),
        kind="anomalies",
        columns=(Anomaly.id,),
        descending=True,
        request=page,
        key_of=lambda a: (a.id,),
    )


async def checkpoints_by_ids(session: AsyncSession, *, ids: Sequence[int]) -> dict[int, Checkpoint]:
    """Checkpoints by id, in one statement."""
    return await _by_ids(session, Checkpoint, ids)


async def anomalies_by_ids(session: AsyncSession, *, ids: Sequence[int]) -> dict[int, Anomaly]:
    """Anomalies by id, in one statement."""
    return await _by_ids(session, Anomaly, ids)


@dataclass
class WorkflowSummary:
    """What the overview shows beside a workflow row besides its denormalised columns."""

    retries: int = 0
    last_anomaly: Anomaly | None = None
    last_anomaly_ref: tuple[int, int] | None = None  # (slurm job id, attempt index)
    active_advice: list[Advice] = field(default_factory=list)


async def workflow_summaries(session: AsyncSession, *, workflow_ids: Sequence[int]) -> dict[int, WorkflowSummary]:
    """Retry count, newest anomaly and active Advice of each workflow: three statements for a whole page."""
    result = {wid: WorkflowSummary() for wid in workflow_ids}
    if not workflow_ids:
        return result
    ids = list(set(workflow_ids))
    retries = await session.execute(
        select(Attempt.workflow_id, func.count())
        .where(Attempt.workflow_id.in_(ids), Attempt.attempt_index > 0)
        .group_by(Attempt.workflow_id)
    )
    for workflow_id, count in retries.all():
        result[workflow_id].retries = int(count)
    rank = func.row_number().over(partition_by=Attempt.workflow_id, order_by=Anomaly.id.desc()).label("rank")
    inner = (
        select(
            Anomaly.id.label("anomaly_id"),
            Attempt.workflow_id.label("workflow_id"),
            Attempt.slurm_job_id,
            Attempt.attempt_index,
            rank,
        )
        .join(Attempt, Attempt.id == Anomaly.attempt_id)
        .where(Attempt.workflow_id.in_(ids))
        .subquery()
    )
    newest = await session.execute(
        select(Anomaly, inner.c.workflow_id, inner.c.slurm_job_id, inner.c.attempt_index)
        .join(inner, inner.c.anomaly_id == Anomaly.id)
        .where(inner.c.rank == 1)
    )
    for anomaly, workflow_id, slurm_job_id, attempt_index in newest.all():
        result[workflow_id].last_anomaly = anomaly
        result[workflow_id].last_anomaly_ref = (slurm_job_id, attempt_index)
    active = await session.execute(
        select(Advice, Job.workflow_id)
        .join(Job, Job.id == Advice.job_id)
        .where(Job.workflow_id.in_(ids), Advice.active.is_(True))
        .order_by(Advice.id.desc())
    )
    for advice, workflow_id in active.all():
        result[workflow_id].active_advice.append(advice)
    return result


async def not_enrolled_jobs(session: AsyncSession, *, limit: int = 20, cluster: str | None = None) -> list[Job]:
    """The newest jobs that tried to enrol but were refused (they belong to no workflow), with their reasons."""
    query = select(Job).where(Job.workflow_id.is_(None), Job.enrolment != "ENROLLED")
    if cluster:
        query = query.where(Job.cluster == cluster)
    return list((await session.scalars(query.order_by(Job.id.desc()).limit(limit))).all())


async def workflow_filter_choices(session: AsyncSession) -> tuple[list[str], list[str]]:
    """The clusters and environments that exist, for the overview's filter menus."""
    clusters = (await session.scalars(select(Workflow.cluster).distinct().order_by(Workflow.cluster))).all()
    environments = (await session.scalars(select(Workflow.environment).distinct().order_by(Workflow.environment))).all()
    return list(clusters), list(environments)


async def workflow_job_ids(session: AsyncSession, *, workflow_id: int) -> list[tuple[str, int]]:
    """(cluster, Slurm job id) of every job of a workflow, so live streams can match Advice changes."""
    rows = await session.execute(select(Job.cluster, Job.slurm_job_id).where(Job.workflow_id == workflow_id))
    return [(cluster, job_id) for cluster, job_id in rows.all()]


async def _by_ids(session: AsyncSession, model: type[R], ids: Sequence[int]) -> dict[int, R]:
    if not ids:
        return {}
    rows = (await session.scalars(select(model).where(model.id.in_(list(set(ids)))))).all()  # type: ignore[attr-defined]
    return {row.id: row for row in rows}  # type: ignore[attr-defined]


async def _first_per_group(
    session: AsyncSession,
    model: type[R],
    group_column: Any,
    group_ids: Sequence[int],
    order: tuple[Any, ...],
    limit: int,
) -> dict[int, list[R]]:
    """The first `limit` rows of each group in `order`: a window function, so one statement for all groups."""
    result: dict[int, list[R]] = {gid: [] for gid in group_ids}
    if not group_ids or limit <= 0:
        return result
    rank = func.row_number().over(partition_by=group_column, order_by=order).label("rank")
    inner = select(model.id.label("row_id"), rank).where(group_column.in_(list(set(group_ids)))).subquery()  # type: ignore[attr-defined]
    query = (
        select(model)
        .join(inner, inner.c.row_id == model.id)  # type: ignore[attr-defined]
        .where(inner.c.rank <= limit)
        .order_by(group_column, inner.c.rank)
    )
    for row in (await session.scalars(query)).all():
        result[getattr(row, group_column.key)].append(row)
    return result
