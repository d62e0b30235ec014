"""The one home of test rows: jobs, attempts, evidence, Advice and actions, written through the real services (ORM
inserts where no service writes them), and the reads tests check them with. Folder helpers import from here."""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.advice.models import Advice, SchedulerAction
from app.audit import service as audit
from app.audit.models import AuditEvent
from app.domain.admission.policy import AnomalyDetectionConfig
from app.evidence.models import Anomaly, Checkpoint, LogSource, PendingLogEvent
from app.infra.context import AppContext
from app.infra.db import utcnow
from app.jobs import service as jobs
from app.jobs.models import Attempt, Job

CLUSTER = "test"
T0 = dt.datetime(2025, 3, 1, 8, 0, tzinfo=dt.UTC)
DETECTION: dict[str, Any] = {
    "log_based_timeout_enabled": True,
    "log_based_timeout_threshold_pretraining": 960,
    "log_based_timeout_threshold_trainingloop": 840,
    "straggler_detection_enabled": False,
}


def effective_policy(
    *,
    workflow_id: str = "wf",
    mode: str = "observe",
    max_requeue_times: int = 3,
    shared: bool = False,
    detection: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A parsed policy as stored; detection defaults to every known key at its default."""
    return {
        "workflow_id": workflow_id,
        "environment": "test-env",
        "mode": mode,
        "auto_resume_mode": "requeue",
        "max_requeue_times": max_requeue_times,
        "log_file_paths_shared_across_attempts": shared,
        "anomaly_detection_config": AnomalyDetectionConfig().to_dict() if detection is None else detection,
    }


POLICY = effective_policy(workflow_id="llama-pretrain", max_requeue_times=2, detection=DETECTION)


def registration(slurm_job_id: int, **overrides: Any) -> jobs.JobRegistration:
    """An enrolled job with a valid policy; every other field at the service's default unless overridden."""
    values: dict[str, Any] = {
        "cluster": CLUSTER,
        "slurm_job_id": slurm_job_id,
        "environment": "test-env",
        "enrolment": "ENROLLED",
        "enrolment_reason": None,
        "workflow_key": "wf",
        "policy_valid": True,
        "policy_effective": effective_policy(),
        "user_id": os.getuid(),  # the tests write the job's log files as this process's user
        "group_id": os.getgid(),
        **overrides,
    }
    return jobs.JobRegistration(**values)


def dashboard_registration(slurm_job_id: int, **overrides: Any) -> jobs.JobRegistration:
    """An enrolled job as the dashboard shows it: named, owned, act requested but observed."""
    values: dict[str, Any] = {
        "workflow_key": "llama-pretrain",
        "name": "llama-8b",
        "user": "alice",
        "partition": "gpu",
        "requested_mode": "act",
        "registered_mode": "observe",
        "mode_reason": "act requested but RECOVERY_ACKNOWLEDGE_SCHEDULER_ACTIONS is false",
        "requeue_eligible": True,
        "policy_effective": POLICY,
        "policy_wrapper": "APS",
        **overrides,
    }
    return registration(slurm_job_id, **values)


# --- jobs and attempts, one per call -------------------------------------------------------------------------------


async def enrolled_job(ctx: AppContext, slurm_job_id: int, *, shared: bool = False, **detection: Any) -> Job:
    """An enrolled job whose policy has these anomaly-detection settings (others at their defaults)."""
    policy = effective_policy(shared=shared, detection={**AnomalyDetectionConfig().to_dict(), **detection})
    async with ctx.sessions() as session, session.begin():
        return await jobs.register_job(
            session,
            registration=registration(
                slurm_job_id, cluster=ctx.settings.cluster, policy_effective=policy, shared_log_paths=shared
            ),
        )


async def add_attempt(ctx: AppContext, job: Job, index: int, *, state: str = "RUNNING", **values: Any) -> Attempt:
    async with ctx.sessions() as session, session.begin():
        record = await session.get(Job, job.id)
        assert record is not None
        return await jobs.create_attempt(session, job=record, attempt_index=index, state=state, **values)


async def update(ctx: AppContext, attempt: Attempt, **values: Any) -> None:
    async with ctx.sessions() as session, session.begin():
        row = await session.get(Attempt, attempt.id)
        assert row is not None
        await jobs.update_attempt(session, attempt=row, **values)


async def attempt(ctx: AppContext, job_id: int, index: int = 0) -> Attempt:
    """The attempt `index` of Slurm job `job_id`."""
    async with ctx.sessions() as session:
        found = await session.scalar(
            select(Attempt).where(Attempt.slurm_job_id == job_id, Attempt.attempt_index == index)
        )
        assert found is not None
        return found


async def add_anomaly(
    ctx: AppContext,
    job_id: int,
    *,
    kind: str = "CRASH",
    index: int = 0,
    node: str | None = None,
    category: str = "segfault",
    key: str | None = None,
) -> int:
    """An anomaly row as the watcher writes it."""
    target = await attempt(ctx, job_id, index)
    async with ctx.sessions() as session, session.begin():
        row = Anomaly(
            attempt_id=target.id,
            event_key=key or f"{job_id}-{index}-{kind}-{node}-{category}",
            kind=kind,
            category=category,
            detector="test",
            message=f"{kind} {category}",
            node=node,
            line="Rank0: segmentation fault",
        )
        session.add(row)
        await session.flush()
        return row.id


# --- whole histories -----------------------------------------------------------------------------------------------


@dataclass
class History:
    """Ids of what seed_history wrote."""

    workflow_id: int
    job_id: int
    slurm_job_id: int
    attempt_ids: list[int]
    attempt_uuids: list[str]
    advice_id: int
    refused_job_id: int


async def seed_history(
    sessions: Any, *, slurm_job_id: int = 4242, second_running: bool = True, t0: dt.datetime = T0
) -> History:
    """A workflow whose job crashed on attempt 0 (anomaly, checkpoint, RESTART Advice, milestones) and retried."""

    def at(minutes: float) -> dt.datetime:
        return t0 + dt.timedelta(minutes=minutes)

    async with sessions() as session, session.begin():
        job = await jobs.register_job(session, registration=dashboard_registration(slurm_job_id), produced_at=t0)
        a0 = await jobs.create_attempt(
            session,
            job=job,
            attempt_index=0,
            state="RUNNING",
            nodes=["gpu-a01", "gpu-a02"],
            start_time=at(1),
            stdout_path=f"/logs/llama-{slurm_job_id}-0.out",
            stderr_path=f"/logs/llama-{slurm_job_id}-0.err",
            produced_at=at(1),
        )
        session.add(
            Checkpoint(
                attempt_id=a0.id,
                event_key=f"ck-{slurm_job_id}-0",
                kind="saved",
                framework="megatron",
                iteration=1200,
                path="/ckpt/iter_0001200",
                log_path=a0.stdout_path,
                line_number=880,
                line="saved checkpoint to /ckpt/iter_0001200 at iteration 1200",
                source_time=at(20),
            )
        )
        session.add(
            Anomaly(
                attempt_id=a0.id,
                event_key=f"an-{slurm_job_id}-0",
                kind="CRASH",
                category="xid",
                detector="signatures",
                message="NVIDIA Xid 79 on gpu-a02: GPU has fallen off the bus",
                node="gpu-a02",
                xid=79,
                log_path=a0.stderr_path,
                line_number=1312,
                line="NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
                source_time=at(31),
                detected_at=at(31) + dt.timedelta(seconds=2),
                outlook="infrastructure",
                blamed_nodes=[{"node": "gpu-a02", "provenance": "line"}],
            )
        )
        await audit.record(
            session,
            component="watcher",
            event_type="anomaly.detected",
            level="ERROR",
            message="Xid 79 on gpu-a02",
            cluster=CLUSTER,
            slurm_job_id=slurm_job_id,
            attempt_index=0,
            workflow_id=job.workflow_id,
            produced_at=at(31) + dt.timedelta(seconds=2),
        )
        await jobs.update_attempt(
            session,
            attempt=a0,
            job=job,
            state="FAILED",
            exit_code=1,
            end_time=at(32),
            ended_reason="NonZeroExitCode",
            produced_at=at(32),
        )
        advice = Advice(
            attempt_id=a0.id,
            job_id=job.id,
            cluster=CLUSTER,
            slurm_job_id=slurm_job_id,
            attempt_index=0,
            operation="RESTART",
            exclusions=["gpu-a02"],
            reason="crash (Xid 79) with 1 of 2 retries used",
            rule="retry_allowed",
            generation=1,
            mode="observe",
            mode_reason="observe: acknowledgment ceiling off",
            active=True,
            disposition="PENDING",
            created_at=at(32) + dt.timedelta(seconds=5),
            updated_at=at(32) + dt.timedelta(seconds=5),
        )
        session.add(advice)
        await session.flush()
        for i, step in enumerate(("requeue_hold", "update_exclusions", "release")):
            started = at(33) + dt.timedelta(seconds=i * 3)
            session.add(
                SchedulerAction(
                    advice_id=advice.id,
                    generation=1,
                    step=step,
                    idempotency_key=f"{advice.id}-1-{step}",
                    status="SHADOW",
                    command=f"scontrol {step} {slurm_job_id}",
                    started_at=started,
                    finished_at=started + dt.timedelta(milliseconds=400),
                    duration_ms=400.0,
                )
            )
        await audit.record(
            session,
            component="controller",
            event_type="reconciliation.converged",
            message="desired state observed",
            cluster=CLUSTER,
            slurm_job_id=slurm_job_id,
            attempt_index=0,
            workflow_id=job.workflow_id,
            produced_at=at(34),
        )
        a1 = await jobs.create_attempt(
            session,
            job=job,
            attempt_index=1,
            state="PENDING",
            produced_at=at(35),
            stdout_path=f"/logs/llama-{slurm_job_id}-1.out",
        )
        if second_running:
            await jobs.update_attempt(
                session,
                attempt=a1,
                job=job,
                state="RUNNING",
                nodes=["gpu-a03", "gpu-a04"],
                start_time=at(40),
                produced_at=at(40),
            )
        refused = await jobs.register_job(
            session,
            registration=dashboard_registration(
                slurm_job_id + 1,
                enrolment="ENVIRONMENT_MISMATCH",
                enrolment_reason="environment 'prod' is not 'test-env'",
                workflow_key=None,
                policy_valid=True,
            ),
        )
        assert job.workflow_id is not None
        return History(
            workflow_id=job.workflow_id,
            job_id=job.id,
            slurm_job_id=slurm_job_id,
            attempt_ids=[a0.id, a1.id],
            attempt_uuids=[a0.uuid, a1.uuid],
            advice_id=advice.id,
            refused_job_id=refused.slurm_job_id,
        )


@dataclass
class Seeded:
    """Rows seed_many wrote, by kind."""

    jobs: list[Job]
    attempts: list[Attempt]
    advice: list[Advice]


async def seed_job(
    session: AsyncSession,
    *,
    slurm_job_id: int,
    workflow_key: str,
    name: str = "train",
    attempts: int = 1,
    failed: bool = True,
    checkpoints: int = 0,
    anomalies: int = 0,
    advice: bool = False,
    cluster: str = CLUSTER,
    array: tuple[int, int] | None = None,
) -> tuple[Job, list[Attempt], list[Advice]]:
    """A job registered through the jobs service with `attempts` attempts; evidence and Advice by ORM inserts."""
    job = await jobs.register_job(
        session,
        registration=registration(
            slurm_job_id,
            cluster=cluster,
            array_job_id=array[0] if array else None,
            array_task_id=array[1] if array else None,
            workflow_key=workflow_key,
            name=name,
            partition="gpu",
            requested_mode="act",
            registered_mode="observe",
            mode_reason="acknowledgment ceiling is off",
            requeue_eligible=True,
            state="RUNNING",
            policy_wrapper="APS",
            policy_effective=effective_policy(
                workflow_id=workflow_key, mode="act", max_requeue_times=2, detection=DETECTION
            ),
            policy_warnings=[{"path": "$.APS.extra", "message": "unknown key"}],
        ),
    )
    made: list[Attempt] = []
    advices: list[Advice] = []
    for index in range(attempts):
        row = await jobs.create_attempt(
            session,
            job=job,
            attempt_index=index,
            state="RUNNING",
            nodes=[f"node{index}"],
            stdout_path=f"/logs/{slurm_job_id}-{index}.out",
            start_time=utcnow(),
        )
        if failed or index < attempts - 1:
            await jobs.update_attempt(session, attempt=row, job=job, state="FAILED", exit_code=1, end_time=utcnow())
        for n in range(checkpoints):
            session.add(
                Checkpoint(
                    attempt_id=row.id,
                    event_key=f"ck-{row.id}-{n}",
                    kind="saved",
                    framework="megatron",
                    iteration=100 * (n + 1),
                    path=f"/ckpt/iter_{n}",
                )
            )
        for n in range(anomalies):
            session.add(
                Anomaly(
                    attempt_id=row.id,
                    event_key=f"an-{row.id}-{n}",
                    kind="CRASH",
                    category="CUDA_ERROR",
                    detector="signatures",
                    message="CUDA error",
                    node=f"node{index}",
                    details={"n": n},
                    outlook="infrastructure",
                    blamed_nodes=[{"node": f"node{index}", "provenance": "line"}],
                )
            )
        if advice:
            decided = Advice(
                attempt_id=row.id,
                job_id=job.id,
                cluster=cluster,
                slurm_job_id=slurm_job_id,
                attempt_index=index,
                operation="RESTART",
                exclusions=[f"node{index}"],
                reason="crash",
                rule="retry",
                generation=1,
                mode="observe",
                disposition="PENDING",
                active=True,
            )
            session.add(decided)
            await session.flush()
            session.add(
                SchedulerAction(
                    advice_id=decided.id,
                    generation=1,
                    step="requeue_hold",
                    idempotency_key=f"idem-{decided.id}-1",
                    status="SHADOW",
                    duration_ms=1.5,
                    finished_at=utcnow(),
                )
            )
            advices.append(decided)
        made.append(row)
    await session.flush()
    return job, made, advices


async def seed_many(
    sessions: async_sessionmaker[AsyncSession], *, count: int, first_job_id: int = 1000, **kwargs: Any
) -> Seeded:
    """`count` jobs (one workflow each) in one transaction."""
    result = Seeded([], [], [])
    async with sessions() as session, session.begin():
        for n in range(count):
            job, made, advices = await seed_job(
                session, slurm_job_id=first_job_id + n, workflow_key=f"wf-{n}", **kwargs
            )
            result.jobs.append(job)
            result.attempts.extend(made)
            result.advice.extend(advices)
    return result


# --- reads ---------------------------------------------------------------------------------------------------------


async def read_log_source(sessions: Any, *, attempt_id: int, path: str) -> LogSource:
    """A log source of the attempt that the collector opened and read (its device and inode, as the reader stores)."""
    st = os.lstat(path)
    async with sessions() as session, session.begin():
        attempt_row = await session.get(Attempt, attempt_id)
        assert attempt_row is not None
        row = LogSource(
            path=path,
            job_id=attempt_row.job_id,
            attempt_id=attempt_id,
            shared=False,
            offset=st.st_size,
            line_number=0,
            device=st.st_dev,
            inode=st.st_ino,
        )
        session.add(row)
    return row


async def rows(ctx: AppContext, model: Any, *where: Any) -> list[Any]:
    """Every row of `model` matching `where`, by id."""
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


async def events(ctx: AppContext, event_type: str) -> list[AuditEvent]:
    """Audit events of one type, oldest first."""
    return await rows(ctx, AuditEvent, AuditEvent.event_type == event_type)


async def actions(ctx: AppContext, advice_id: int | None = None) -> list[SchedulerAction]:
    """Scheduler actions (of one Advice if given), oldest first."""
    return await rows(ctx, SchedulerAction, *([] if advice_id is None else [SchedulerAction.advice_id == advice_id]))


async def advice_of(ctx: AppContext, job_id: int) -> list[Advice]:
    """Every Advice of Slurm job `job_id`, by attempt (and decision round)."""
    async with ctx.sessions() as session:
        query = select(Advice).where(Advice.slurm_job_id == job_id).order_by(Advice.attempt_index, Advice.id)
        return list((await session.scalars(query)).all())


# Three finished stories for the dashboard and API tests: a recovered, a stopped and an observe-only workflow.

RECOVERED, STOPPED, OBSERVED = 5101, 5201, 5301


def _at(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


async def _failed_attempt(session: Any, job: Any, *, nodes: list[str], anomaly: dict[str, Any] | None) -> Any:
    a0 = await jobs.create_attempt(
        session, job=job, attempt_index=0, state="RUNNING", nodes=nodes, start_time=_at(1), produced_at=_at(1)
    )
    if anomaly:
        session.add(
            Anomaly(
                attempt_id=a0.id,
                event_key=f"story-{job.slurm_job_id}",
                detector="signatures",
                log_path=f"/logs/{job.slurm_job_id}-0.err",
                source_time=_at(20),
                detected_at=_at(20),
                **anomaly,
            )
        )
    await jobs.update_attempt(
        session, attempt=a0, job=job, state="FAILED", exit_code=1, end_time=_at(21), produced_at=_at(21)
    )
    return a0


def _advice(job: Any, a0: Any, **values: Any) -> Advice:
    base = {
        "attempt_id": a0.id,
        "job_id": job.id,
        "cluster": CLUSTER,
        "slurm_job_id": job.slurm_job_id,
        "attempt_index": 0,
        "exclusions": [],
        "generation": 1,
        "active": False,
        "disposition": "CONVERGED",
        "created_at": _at(22),
        "updated_at": _at(22),
    }
    return Advice(**{**base, **values})


def _story_requeue_hold(advice: Advice, slurm_job_id: int, *, status: str, duration_ms: float) -> SchedulerAction:
    """The requeue-hold milestone of a story's Advice, sent (SUCCEEDED) or only shadowed, at minute 22."""
    return SchedulerAction(
        advice_id=advice.id,
        generation=1,
        step="requeue_hold",
        idempotency_key=f"story-{advice.id}",
        status=status,
        command=f"scontrol requeuehold {slurm_job_id}",
        started_at=_at(22),
        finished_at=_at(22),
        duration_ms=duration_ms,
    )


async def seed_stories(sessions: Any) -> dict[str, int]:
    """Workflows wf-recovered (5101), wf-stopped (5201) and wf-observed (5301), each one decided failure."""
    async with sessions() as session, session.begin():
        job = await jobs.register_job(
            session, registration=dashboard_registration(RECOVERED, workflow_key="wf-recovered"), produced_at=T0
        )
        a0 = await _failed_attempt(
            session,
            job,
            nodes=["gpu-b01", "gpu-b02"],
            anomaly={"kind": "CRASH", "category": "xid", "node": "gpu-b02", "xid": 79, "line_number": 812},
        )
        advice = _advice(
            job,
            a0,
            operation="RESTART",
            exclusions=["gpu-b02"],
            reason="attempt 0 crashed: restart as attempt 1 excluding gpu-b02; retry 1 of 2.",
            rule="restart_allowed",
            mode="act",
        )
        session.add(advice)
        await session.flush()
        session.add(_story_requeue_hold(advice, RECOVERED, status="SUCCEEDED", duration_ms=120.0))
        a1 = await jobs.create_attempt(session, job=job, attempt_index=1, state="PENDING", produced_at=_at(23))
        await jobs.update_attempt(
            session, attempt=a1, job=job, state="RUNNING", nodes=["gpu-b03"], start_time=_at(25), produced_at=_at(25)
        )
        session.add(
            Checkpoint(
                attempt_id=a1.id,
                event_key=f"story-load-{RECOVERED}",
                kind="loaded",
                iteration=1200,
                path="/ckpt/iter_0001200",
                source_time=_at(26),
            )
        )

        job = await jobs.register_job(
            session, registration=dashboard_registration(STOPPED, workflow_key="wf-stopped"), produced_at=T0
        )
        a0 = await _failed_attempt(session, job, nodes=["gpu-c01"], anomaly=None)
        session.add(
            _advice(
                job,
                a0,
                operation="TERMINATE",
                reason="attempt 0 failed: the retry limit is reached, so it is not restarted.",
                rule="retry_limit",
                mode="act",
            )
        )

        job = await jobs.register_job(
            session, registration=dashboard_registration(OBSERVED, workflow_key="wf-observed"), produced_at=T0
        )
        a0 = await _failed_attempt(
            session, job, nodes=["gpu-d01"], anomaly={"kind": "NO_PROGRESS", "category": "hang", "node": None}
        )
        advice = _advice(
            job,
            a0,
            operation="RESTART",
            reason="attempt 0 hung: restart as attempt 1; retry 1 of 2.",
            rule="restart_allowed",
            mode="observe",
            disposition="PENDING",
            disposition_reason="NOT_AUTHORIZED",
            active=True,
        )
        session.add(advice)
        await session.flush()
        session.add(_story_requeue_hold(advice, OBSERVED, status="SHADOW", duration_ms=0.0))
        await session.flush()
        return {"observed_advice": advice.id}
