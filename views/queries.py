"""Dashboard-only reads that app/jobs/queries.py and app/advice/queries.py do not offer (yet).

Each function costs one statement whatever the number of rows asked about, so pages stay free of N+1.
Candidates to fold into the shared read services once the API needs them too.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Sequence

from sqlalchemy import func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.advice.models import Advice
from app.audit.models import AuditEvent
from app.evidence.models import Anomaly
from app.jobs.models import Attempt, Job, Workflow

TIMELINE_EVENT_TYPES = ("attempt.registered", "attempt.state_changed")
VERIFICATION_PREFIX = "reconciliation."
MAX_TIMELINE_EVENTS = 2000


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
        select(Anomaly.id.label("anomaly_id"), Attempt.workflow_id.label("workflow_id"), Attempt.slurm_job_id, Attempt.attempt_index, rank)
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


async def workflow_job_ids(session: AsyncSession, *, workflow_id: int) -> list[tuple[str, int]]:
    """(cluster, Slurm job id) of every job of a workflow, so live streams can match Advice changes."""
    rows = await session.execute(select(Job.cluster, Job.slurm_job_id).where(Job.workflow_id == workflow_id))
    return [(cluster, job_id) for cluster, job_id in rows.all()]
