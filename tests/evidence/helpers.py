"""Shared setup for evidence, collector and watcher tests: enrolled jobs and attempts in the database."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import select

from app.audit.models import AuditEvent
from app.context import AppContext
from app.domain.policy import AnomalyDetectionConfig
from app.evidence.models import Anomaly, Checkpoint, LogSource, PendingLogEvent
from app.jobs import service as jobs
from app.jobs.models import Attempt, Job

T0 = dt.datetime(2026, 11, 30, 2, 0, 0, tzinfo=dt.UTC)


def effective_policy(*, shared: bool = False, **detection: Any) -> dict[str, Any]:
    return {
        "workflow_id": "wf",
        "environment": "test-env",
        "mode": "observe",
        "auto_resume_mode": "requeue",
        "max_requeue_times": 3,
        "log_file_paths_shared_across_attempts": shared,
        "anomaly_detection_config": {**AnomalyDetectionConfig().to_dict(), **detection},
    }


async def make_job(ctx: AppContext, slurm_job_id: int, *, shared: bool = False, **detection: Any) -> Job:
    async with ctx.sessions() as session, session.begin():
        return await jobs.register_job(
            session,
            registration=jobs.JobRegistration(
                cluster=ctx.settings.cluster,
                slurm_job_id=slurm_job_id,
                environment="test-env",
                enrolment="ENROLLED",
                enrolment_reason=None,
                workflow_key="wf",
                policy_valid=True,
                policy_effective=effective_policy(shared=shared, **detection),
                shared_log_paths=shared,
            ),
        )


async def add_attempt(ctx: AppContext, job: Job, index: int, *, state: str = "RUNNING", **values: Any) -> Attempt:
    async with ctx.sessions() as session, session.begin():
        record = await session.get(Job, job.id)
        return await jobs.create_attempt(session, job=record, attempt_index=index, state=state, **values)


async def update(ctx: AppContext, attempt: Attempt, **values: Any) -> None:
    async with ctx.sessions() as session, session.begin():
        row = await session.get(Attempt, attempt.id)
        await jobs.update_attempt(session, attempt=row, **values)


async def rows(ctx: AppContext, model: type, *where: Any) -> list[Any]:
    async with ctx.sessions() as session:
        return list((await session.scalars(select(model).where(*where).order_by(model.id))).all())


async def anomalies(ctx: AppContext, *where: Any) -> list[Anomaly]:
    return await rows(ctx, Anomaly, *where)


async def checkpoints(ctx: AppContext, *where: Any) -> list[Checkpoint]:
    return await rows(ctx, Checkpoint, *where)


async def sources(ctx: AppContext, *where: Any) -> list[LogSource]:
    return await rows(ctx, LogSource, *where)


async def pending(ctx: AppContext) -> list[PendingLogEvent]:
    return await rows(ctx, PendingLogEvent)


async def audit_events(ctx: AppContext, event_type: str) -> list[AuditEvent]:
    return await rows(ctx, AuditEvent, AuditEvent.event_type == event_type)
