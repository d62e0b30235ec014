"""Goodput reads: the points in time of each attempt (start, first progress, checkpoint, failure, Advice, release)
gathered in a few statements per batch of jobs, cut into buckets by domain/fleetwide/goodput.py (docs/goodput.md)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.advice.models import Advice, SchedulerAction
from app.domain.admission.mode import ENROLLED
from app.domain.control import states
from app.domain.decision.checkpoint_rules import CheckResult
from app.domain.fleetwide.goodput import AttemptTimes, Breakdown, RunGoodput, merge, run_goodput
from app.evidence.models import Anomaly, Checkpoint
from app.infra.db import utcnow
from app.infra.sql import rows_in, scalars_in
from app.jobs.models import Attempt, Job

MAX_JOBS = 2000  # a cluster summary reads at most this many of the newest jobs in its window


@dataclass
class JobGoodput:
    """One job's run: its Slurm id and the domain's breakdown."""

    slurm_job_id: int
    run: RunGoodput


@dataclass
class GoodputReport:
    """A workflow's or a cluster's goodput: the total and each job's run."""

    total: Breakdown = field(default_factory=Breakdown)
    jobs: list[JobGoodput] = field(default_factory=list)
    truncated: bool = False

    @property
    def failures(self) -> int:
        return sum(job.run.failures for job in self.jobs)


def _parse_time(value: object) -> dt.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


async def _attempt_times(session: AsyncSession, attempts: Sequence[Attempt]) -> dict[int, AttemptTimes]:
    """The goodput points of these attempts, by attempt id (five statements per 500 attempts)."""
    ids = [a.id for a in attempts]
    if not ids:
        return {}
    saves: dict[int, dt.datetime] = {}
    for attempt_id, source, read in await rows_in(
        session,
        select(Checkpoint.attempt_id, Checkpoint.source_time, Checkpoint.read_time)
        .where(Checkpoint.kind == "saved")
        .order_by(Checkpoint.id),
        Checkpoint.attempt_id,
        ids,
    ):
        saves[attempt_id] = source or read  # the newest save wins (ordered by id)
    failures: dict[int, dt.datetime] = {}
    for attempt_id, kind, source, detected, details in await rows_in(
        session,
        select(Anomaly.attempt_id, Anomaly.kind, Anomaly.source_time, Anomaly.detected_at, Anomaly.details).where(
            Anomaly.kind.in_(("CRASH", "NO_PROGRESS"))
        ),
        Anomaly.attempt_id,
        ids,
    ):
        moment = _parse_time((details or {}).get("lastOutputAt")) if kind == "NO_PROGRESS" else None
        moment = moment or source or detected
        if moment is not None and (attempt_id not in failures or moment < failures[attempt_id]):
            failures[attempt_id] = moment
    advice: dict[int, Advice] = {
        row.attempt_id: row for row in await scalars_in(session, select(Advice), Advice.attempt_id, ids)
    }
    releases: dict[int, dt.datetime] = {}
    if advice:
        by_advice = {row.id: row.attempt_id for row in advice.values()}
        for advice_id, finished in await rows_in(
            session,
            select(SchedulerAction.advice_id, func.max(SchedulerAction.finished_at))
            .where(SchedulerAction.step == "release", SchedulerAction.status == "SUCCEEDED")
            .group_by(SchedulerAction.advice_id),
            SchedulerAction.advice_id,
            list(by_advice),
        ):
            if finished is not None:
                releases[by_advice[advice_id]] = finished
    out: dict[int, AttemptTimes] = {}
    for a in attempts:
        decided = advice.get(a.id)
        check = CheckResult.from_dict(decided.checkpoint_check) if decided is not None else None
        saved = saves.get(a.id) if check is None or check.loadable else None
        failed = decided is not None or a.state in states.RETRYABLE_FAILED
        out[a.id] = AttemptTimes(
            attempt_index=a.attempt_index,
            start=a.start_time,
            end=a.end_time if a.state not in states.ACTIVE else None,
            failed=failed,
            first_progress=a.first_progress_at,
            last_checkpoint=saved,
            failure_at=min(failures[a.id], a.end_time) if a.id in failures and a.end_time else failures.get(a.id),
            decided_at=decided.created_at if decided is not None else None,
            released_at=releases.get(a.id),
        )
    return out


async def job_runs(
    session: AsyncSession, *, job_ids: Sequence[int], now: dt.datetime | None = None
) -> list[JobGoodput]:
    """Each job's goodput run, in the order given."""
    now = now or utcnow()
    if not job_ids:
        return []
    attempts = list(
        await scalars_in(
            session, select(Attempt).where(Attempt.adopted_at.is_(None)), Attempt.job_id, sorted(set(job_ids))
        )
    )
    times = await _attempt_times(session, attempts)
    slurm_ids = dict(
        (await session.execute(select(Job.id, Job.slurm_job_id).where(Job.id.in_(list(set(job_ids)))))).all()
    )
    per_job: dict[int, list[AttemptTimes]] = {}
    for a in attempts:
        per_job.setdefault(a.job_id, []).append(times[a.id])
    return [JobGoodput(slurm_ids.get(j, 0), run_goodput(per_job.get(j, []), now=now)) for j in job_ids]


def _report(runs: list[JobGoodput], *, truncated: bool = False) -> GoodputReport:
    return GoodputReport(total=merge(job.run for job in runs), jobs=runs, truncated=truncated)


async def workflows_goodput(
    session: AsyncSession, *, workflow_ids: Sequence[int], now: dt.datetime | None = None
) -> dict[int, GoodputReport]:
    """The goodput of each workflow's jobs (newest MAX_JOBS each), in a fixed number of statements for all."""
    if not workflow_ids:
        return {}
    rows = (
        await session.execute(
            select(Job.workflow_id, Job.id).where(Job.workflow_id.in_(list(set(workflow_ids)))).order_by(Job.id.desc())
        )
    ).all()
    per_workflow: dict[int, list[int]] = {}
    for workflow_id, job_id in rows:
        if workflow_id is not None:
            per_workflow.setdefault(workflow_id, []).append(job_id)
    chosen = {w: sorted(ids[:MAX_JOBS]) for w, ids in per_workflow.items()}
    runs = await job_runs(session, job_ids=[j for ids in chosen.values() for j in ids], now=now)
    by_job = dict(zip([j for ids in chosen.values() for j in ids], runs, strict=True))
    return {
        w: _report([by_job[j] for j in chosen.get(w, [])], truncated=len(per_workflow.get(w, [])) > MAX_JOBS)
        for w in workflow_ids
    }


async def workflow_goodput(session: AsyncSession, *, workflow_id: int, now: dt.datetime | None = None) -> GoodputReport:
    """The goodput of a workflow's jobs (newest MAX_JOBS)."""
    return (await workflows_goodput(session, workflow_ids=[workflow_id], now=now))[workflow_id]


async def cluster_goodput(
    session: AsyncSession, *, cluster: str | None, since: dt.datetime, now: dt.datetime | None = None
) -> GoodputReport:
    """The goodput of enrolled jobs seen since ``since`` (all clusters when None), newest MAX_JOBS."""
    query = select(Job.id).where(Job.enrolment == ENROLLED, Job.updated_at >= since)
    if cluster is not None:
        query = query.where(Job.cluster == cluster)
    job_ids = list((await session.scalars(query.order_by(Job.id.desc()).limit(MAX_JOBS + 1))).all())
    truncated = len(job_ids) > MAX_JOBS
    runs = await job_runs(session, job_ids=sorted(job_ids[:MAX_JOBS]), now=now)
    return _report(runs, truncated=truncated)
