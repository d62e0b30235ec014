"""Read side of workflows, jobs, attempts and policies (shared by API, dashboard and worker).

List functions take a small frozen filter and a PageRequest and return a keyset Page; the `*_by_*`
functions load many rows in ONE statement (DataLoaders batch through them), so a page of N rows
costs the same number of statements as a page of one. `workflow_summaries` and its neighbours serve
the dashboard's overview on the same terms.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.domain.admission.mode import ENROLLED
from app.domain.control import states
from app.domain.control.identity import SchedulerJobId, parse_attempt_ref, parse_scheduler_job_id
from app.domain.edge.bounds import is_ascii_digits
from app.infra.pagination import Page, PageRequest, paginate
from app.infra.sql import by_ids, chunks, first_per_group, one_of, scalars_in
from app.jobs.models import Attempt, Job, Policy, Workflow


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
    array_job_id: int | None = None
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


def workflow_query(flt: WorkflowFilter) -> Any:
    """The SELECT of workflows matching `flt` (other areas add their own conditions, then page it)."""
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
        text = flt.search.strip()
        pattern = f"%{_escape_like(text.lower())}%"
        matches = [
            func.lower(Workflow.workflow_key).like(pattern, escape="\\"),
            func.lower(Workflow.latest_job_name).like(pattern, escape="\\"),
        ]
        ref = parse_scheduler_job_id(text)
        if ref is not None:  # a job id (or array_task) names the workflow of that job
            jobs = select(Job.workflow_id).where(Job.workflow_id.is_not(None))
            if ref.task is None:
                jobs = jobs.where(or_(Job.slurm_job_id == ref.job_id, Job.array_job_id == ref.job_id))
            else:
                jobs = jobs.where(Job.array_job_id == ref.job_id, Job.array_task_id == ref.task)
            matches.append(Workflow.id.in_(jobs.scalar_subquery()))
        query = query.where(or_(*matches))
    return query


async def list_workflows(session: AsyncSession, *, filter: WorkflowFilter, page: PageRequest) -> Page[Workflow]:
    """One page of workflows, most recently updated first."""
    return await page_of_workflows(session, query=workflow_query(filter), page=page)


async def page_of_workflows(session: AsyncSession, *, query: Any, page: PageRequest) -> Page[Workflow]:
    """One page of the workflows `query` selects, most recently updated first: every workflow list's cursors."""
    return await paginate(
        session, query, kind="workflows", columns=(Workflow.updated_at, Workflow.id), descending=True, request=page
    )


async def find_workflow(session: AsyncSession, *, key: str, cluster: str | None = None) -> Workflow | None:
    """The workflow with this key (on `cluster`, or the most recently updated one of that key)."""
    query = select(Workflow).where(Workflow.workflow_key == key)
    if cluster:
        query = query.where(Workflow.cluster == cluster)
    return await session.scalar(query.order_by(Workflow.updated_at.desc(), Workflow.id.desc()).limit(1))


async def latest_jobs_of_workflows(session: AsyncSession, *, workflow_ids: Sequence[int]) -> dict[int, Job]:
    """Each workflow's newest job record, in one statement."""
    if not workflow_ids:
        return {}
    newest = (
        select(func.max(Job.id)).where(Job.workflow_id.in_(list(set(workflow_ids)))).group_by(Job.workflow_id)
    ).scalar_subquery()
    rows = (await session.scalars(select(Job).where(Job.id.in_(newest)))).all()
    return {row.workflow_id: row for row in rows if row.workflow_id is not None}


async def find_workflows_by_key(session: AsyncSession, *, key: str, limit: int = 20) -> list[Workflow]:
    """Every workflow with this key (one per cluster and environment), most recently updated first."""
    query = (
        select(Workflow).where(Workflow.workflow_key == key).order_by(Workflow.updated_at.desc(), Workflow.id.desc())
    )
    return list((await session.scalars(query.limit(limit))).all())


async def similar_workflows(session: AsyncSession, *, text: str, limit: int = 5) -> list[Workflow]:
    """Workflows whose key contains `text` (case-insensitive), for "did you mean" suggestions."""
    pattern = f"%{_escape_like(text.strip().lower())}%"
    query = select(Workflow).where(func.lower(Workflow.workflow_key).like(pattern, escape="\\"))
    return list((await session.scalars(query.order_by(Workflow.updated_at.desc()).limit(limit))).all())


async def nearby_jobs(session: AsyncSession, *, slurm_job_id: int, limit: int = 5) -> list[Job]:
    """Recorded jobs with the closest ids to `slurm_job_id` (a mistyped digit), for suggestions."""
    above = select(Job).where(Job.slurm_job_id > slurm_job_id).order_by(Job.slurm_job_id).limit(limit)
    below = select(Job).where(Job.slurm_job_id < slurm_job_id).order_by(Job.slurm_job_id.desc()).limit(limit)
    found = list((await session.scalars(above)).all()) + list((await session.scalars(below)).all())
    found.sort(key=lambda j: abs(j.slurm_job_id - slurm_job_id))
    return found[:limit]


async def workflows_by_ids(session: AsyncSession, *, ids: Sequence[int]) -> dict[int, Workflow]:
    """Workflows by id, in one statement."""
    return await by_ids(session, Workflow, ids)


async def list_jobs(session: AsyncSession, *, filter: JobFilter, page: PageRequest) -> Page[Job]:
    """One page of job records, newest first."""
    query = select(Job)
    if filter.cluster:
        query = query.where(Job.cluster == filter.cluster)
    if filter.workflow_id is not None:
        query = query.where(Job.workflow_id == filter.workflow_id)
    if filter.slurm_job_id is not None:
        query = query.where(Job.slurm_job_id == filter.slurm_job_id)
    if filter.array_job_id is not None:
        query = query.where(Job.array_job_id == filter.array_job_id)
    if not filter.include_retired:
        query = query.where(Job.retired_at.is_(None))
    return await paginate(session, query, kind="jobs", columns=(Job.id,), descending=True, request=page)


async def find_job(session: AsyncSession, *, slurm_job_id: int, cluster: str | None = None) -> Job | None:
    """The current record of a Slurm job id: the live incarnation, else the newest retired one."""
    query = select(Job).where(Job.slurm_job_id == slurm_job_id)
    if cluster:
        query = query.where(Job.cluster == cluster)
    # Live (retired_at NULL) first; among equals the newest record.
    query = query.order_by(Job.retired_at.is_not(None), Job.id.desc()).limit(1)
    return await session.scalar(query)


async def find_job_by_scheduler_id(
    session: AsyncSession, *, ref: SchedulerJobId, cluster: str | None = None
) -> Job | None:
    """The current record of `1234` (a job id) or `1234_7` (task 7 of array 1234, whatever its own job id)."""
    if ref.task is None:
        return await find_job(session, slurm_job_id=ref.job_id, cluster=cluster)
    query = select(Job).where(Job.array_job_id == ref.job_id, Job.array_task_id == ref.task)
    if cluster:
        query = query.where(Job.cluster == cluster)
    return await session.scalar(query.order_by(Job.retired_at.is_not(None), Job.id.desc()).limit(1))


async def array_tasks(session: AsyncSession, *, job: Job, limit: int = 1000) -> list[Job]:
    """The current records of every task of the job's array (itself included), by task id; [] for other jobs."""
    if job.array_job_id is None:
        return []
    query = (
        select(Job)
        .where(Job.cluster == job.cluster, Job.array_job_id == job.array_job_id, Job.retired_at.is_(None))
        .order_by(Job.array_task_id, Job.id)
        .limit(limit)
    )
    return list((await session.scalars(query)).all())


async def jobs_by_ids(session: AsyncSession, *, ids: Sequence[int]) -> dict[int, Job]:
    """Job records by id, in one statement."""
    return await by_ids(session, Job, ids)


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
        query = query.where(Attempt.state.in_(sorted(states.FAILED)))
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
    return await first_per_group(
        session, Attempt, Attempt.job_id, job_ids, (Attempt.attempt_index.asc(), Attempt.id.asc()), limit
    )


async def attempts_by_ids(session: AsyncSession, *, ids: Sequence[int]) -> dict[int, Attempt]:
    """Attempts by id, in one statement."""
    return await by_ids(session, Attempt, ids)


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


def _not_enrolled_query(*, cluster: str | None, search: str | None) -> Any:
    query = select(Job).where(Job.workflow_id.is_(None), Job.enrolment != ENROLLED)
    if cluster:
        query = query.where(Job.cluster == cluster)
    if search:
        text = search.strip().lower()
        matches = [
            func.lower(column).contains(text, autoescape=True)
            for column in (Job.name, Job.enrolment_reason, Job.partition, Job.user, Job.enrolment)
        ]
        if is_ascii_digits(text) and len(text) < 19:  # '٣'.isdigit() is True, and int('٣') is 3
            matches.append(Job.slurm_job_id == int(text))
        query = query.where(or_(*matches))
    return query


async def not_enrolled_page(
    session: AsyncSession,
    *,
    limit: int = 50,
    before_id: int | None = None,
    search: str | None = None,
    cluster: str | None = None,
) -> tuple[list[Job], int, bool]:
    """(one page of refused jobs newest first, how many match in all, whether older ones follow); keyset on id."""
    query = _not_enrolled_query(cluster=cluster, search=search)
    total = int(await session.scalar(select(func.count()).select_from(query.subquery())) or 0)
    if before_id is not None:
        query = query.where(Job.id < before_id)
    rows = list((await session.scalars(query.order_by(Job.id.desc()).limit(limit + 1))).all())
    return rows[:limit], total, len(rows) > limit


async def not_enrolled_with_total(session: AsyncSession, *, limit: int = 20) -> tuple[list[Job], int]:
    """The newest refused jobs and how many there are in all, in one statement (a window count)."""
    query = _not_enrolled_query(cluster=None, search=None).add_columns(func.count().over())
    rows = (await session.execute(query.order_by(Job.id.desc()).limit(limit))).all()
    return [row[0] for row in rows], int(rows[0][1]) if rows else 0


async def workflow_filter_choices(session: AsyncSession) -> tuple[list[str], list[str]]:
    """The clusters and environments that exist, for the overview's filter menus."""
    clusters = (await session.scalars(select(Workflow.cluster).distinct().order_by(Workflow.cluster))).all()
    environments = (await session.scalars(select(Workflow.environment).distinct().order_by(Workflow.environment))).all()
    return list(clusters), list(environments)


@dataclass(frozen=True)
class ClusterCounts:
    """How much of one cluster Recovery has recorded."""

    cluster: str
    jobs: int = 0
    enrolled_jobs: int = 0
    workflows: int = 0


async def cluster_counts(session: AsyncSession) -> dict[str, ClusterCounts]:
    """Every cluster with recorded jobs or workflows, and their counts (two GROUP BY statements)."""
    jobs = (
        await session.execute(
            select(Job.cluster, func.count(), func.count().filter(Job.enrolment == ENROLLED)).group_by(Job.cluster)
        )
    ).all()
    workflows = dict((await session.execute(select(Workflow.cluster, func.count()).group_by(Workflow.cluster))).all())
    names = {row[0] for row in jobs} | set(workflows)
    by_cluster = {row[0]: (row[1], row[2]) for row in jobs}
    return {
        name: ClusterCounts(
            cluster=name,
            jobs=by_cluster.get(name, (0, 0))[0],
            enrolled_jobs=by_cluster.get(name, (0, 0))[1],
            workflows=workflows.get(name, 0),
        )
        for name in sorted(names)
    }


async def workflow_job_ids(session: AsyncSession, *, workflow_id: int) -> list[tuple[str, int]]:
    """(cluster, Slurm job id) of every job of a workflow, so live streams can match Advice changes."""
    rows = await session.execute(select(Job.cluster, Job.slurm_job_id).where(Job.workflow_id == workflow_id))
    return [(cluster, job_id) for cluster, job_id in rows.all()]


# ---- the worker's reads -----------------------------------------------------------------------


async def current_jobs(
    session: AsyncSession, *, cluster: str, slurm_job_ids: Sequence[int] | None = None
) -> dict[int, Job]:
    """The live (not retired) job record per Slurm job id on a cluster."""
    query = select(Job).where(Job.cluster == cluster, Job.retired_at.is_(None))
    if slurm_job_ids is not None:
        query = query.where(one_of(session, Job.slurm_job_id, slurm_job_ids))
    return {job.slurm_job_id: job for job in (await session.scalars(query)).all()}


async def attempts_of(session: AsyncSession, *, job_id: int) -> list[Attempt]:
    """A job's attempts in order."""
    return list(
        (await session.scalars(select(Attempt).where(Attempt.job_id == job_id).order_by(Attempt.attempt_index))).all()
    )


async def latest_attempt(session: AsyncSession, *, job_id: int) -> Attempt | None:
    """The job's newest attempt."""
    return await session.scalar(
        select(Attempt).where(Attempt.job_id == job_id).order_by(Attempt.attempt_index.desc()).limit(1)
    )


async def latest_attempts_of_jobs(session: AsyncSession, *, job_ids: Sequence[int]) -> dict[int, Attempt]:
    """Each job's newest attempt, in one statement."""
    if not job_ids:
        return {}
    rows = (
        await session.scalars(
            select(Attempt).where(one_of(session, Attempt.job_id, job_ids)).order_by(Attempt.attempt_index)
        )
    ).all()
    return {row.job_id: row for row in rows}  # ordered by index: the last one per job wins


async def next_incarnations(session: AsyncSession, *, cluster: str, slurm_job_ids: Sequence[int]) -> dict[int, int]:
    """The incarnation a new record of each Slurm job id gets, in one statement (ids never seen are left out: 0)."""
    if not slurm_job_ids:
        return {}
    rows = await session.execute(
        select(Job.slurm_job_id, func.max(Job.incarnation))
        .where(Job.cluster == cluster, one_of(session, Job.slurm_job_id, slurm_job_ids))
        .group_by(Job.slurm_job_id)
    )
    return {job_id: highest + 1 for job_id, highest in rows.all()}


async def get_job(session: AsyncSession, *, job_id: int) -> Job | None:
    """One job record by id."""
    return await session.get(Job, job_id)


async def get_attempt(session: AsyncSession, *, attempt_id: int) -> Attempt | None:
    """One attempt by id."""
    return await session.get(Attempt, attempt_id)


async def attempt_at(session: AsyncSession, *, job_id: int | None, attempt_index: int | None) -> Attempt | None:
    """A job's attempt by index."""
    return await session.scalar(select(Attempt).where(Attempt.job_id == job_id, Attempt.attempt_index == attempt_index))


async def attempts_by_id_list(session: AsyncSession, *, ids: Sequence[int]) -> list[Attempt]:
    """Attempts by id, one statement per 500 ids."""
    return list(await scalars_in(session, select(Attempt), Attempt.id, sorted(set(ids))))


async def policy_of_job(session: AsyncSession, *, job_id: int) -> Policy | None:
    """The job's policy record."""
    return await session.scalar(select(Policy).where(Policy.job_id == job_id))


async def policies_of_jobs(session: AsyncSession, *, job_ids: Sequence[int], size: int | None = None) -> list[Policy]:
    """The policy records of these jobs, one statement per `size` ids (default 500)."""
    return list(await scalars_in(session, select(Policy), Policy.job_id, job_ids, *([size] if size else [])))


async def attempts_before(session: AsyncSession, *, job_id: int, attempt_index: int) -> list[Attempt]:
    """The job's attempts before this index, in order."""
    return list(
        (
            await session.scalars(
                select(Attempt)
                .where(Attempt.job_id == job_id, Attempt.attempt_index < attempt_index)
                .order_by(Attempt.attempt_index)
            )
        ).all()
    )


async def attempts_of_jobs(session: AsyncSession, *, job_ids: Sequence[int], size: int | None = None) -> list[Attempt]:
    """Every attempt of these jobs in attempt order, one statement per `size` ids (default 500)."""
    query = select(Attempt).order_by(Attempt.attempt_index)
    return list(await scalars_in(session, query, Attempt.job_id, job_ids, *([size] if size else [])))


async def job_ids_of_attempts(session: AsyncSession, *, attempt_ids: Sequence[int]) -> list[int]:
    """The job ids of these attempts."""
    return list(await scalars_in(session, select(Attempt.job_id), Attempt.id, sorted(set(attempt_ids))))


async def live_attempts(
    session: AsyncSession,
    *,
    cluster: str,
    active_states: frozenset[str],
    ended_after: dt.datetime,
    job_ids: Sequence[int] | None = None,
) -> list[tuple[Attempt, Job]]:
    """(attempt, job) of enrolled jobs whose attempt is active, not ended or ended after `ended_after`."""
    query = (
        select(Attempt, Job)
        .join(Job, Job.id == Attempt.job_id)
        .where(Job.cluster == cluster, Job.retired_at.is_(None), Job.enrolment == ENROLLED)
        .where(Attempt.state.in_(sorted(active_states)) | Attempt.end_time.is_(None) | (Attempt.end_time > ended_after))
    )
    if job_ids is None:
        return [(a, j) for a, j in (await session.execute(query)).all()]
    rows: list[tuple[Attempt, Job]] = []
    for chunk in chunks(sorted(job_ids)):
        rows += [(a, j) for a, j in (await session.execute(query.where(Job.id.in_(chunk)))).all()]
    return rows
