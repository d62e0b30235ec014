"""Test data for dashboard tests, written through the real services (and ORM inserts where no service exists yet)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from app.advice.models import Advice, SchedulerAction
from app.audit import service as audit
from app.evidence.models import Anomaly, Checkpoint
from app.jobs import service as jobs

T0 = dt.datetime(2025, 3, 1, 8, 0, tzinfo=dt.UTC)
CLUSTER = "test"
POLICY = {
    "workflow_id": "llama-pretrain",
    "environment": "test-env",
    "mode": "observe",
    "auto_resume_mode": "requeue",
    "max_requeue_times": 2,
    "log_file_paths_shared_across_attempts": False,
    "anomaly_detection_config": {
        "log_based_timeout_enabled": True,
        "log_based_timeout_threshold_pretraining": 960,
        "log_based_timeout_threshold_trainingloop": 840,
        "straggler_detection_enabled": False,
    },
}


@dataclass
class Seeded:
    """Ids of what seed_history wrote."""

    workflow_id: int
    job_id: int
    slurm_job_id: int
    attempt_ids: list[int]
    attempt_uuids: list[str]
    advice_id: int
    refused_job_id: int


def registration(slurm_job_id: int, **overrides: Any) -> jobs.JobRegistration:
    values: dict[str, Any] = dict(
        cluster=CLUSTER,
        slurm_job_id=slurm_job_id,
        environment="test-env",
        enrolment="ENROLLED",
        enrolment_reason=None,
        workflow_key="llama-pretrain",
        name="llama-8b",
        user="alice",
        partition="gpu",
        requested_mode="act",
        effective_mode="observe",
        mode_reason="act requested but RECOVERY_ACKNOWLEDGE_SCHEDULER_ACTIONS is false",
        requeue_eligible=True,
        policy_valid=True,
        policy_effective=POLICY,
        policy_wrapper="APS",
    )
    values.update(overrides)
    return jobs.JobRegistration(**values)


async def seed_history(
    sessions: Any, *, slurm_job_id: int = 4242, second_running: bool = True, t0: dt.datetime = T0
) -> Seeded:
    """A workflow whose job crashed on attempt 0 (anomaly, checkpoint, RESTART Advice, milestones) and retried."""
    T0 = t0  # noqa: N806 - every time below is relative to the chosen start
    async with sessions() as session, session.begin():
        job = await jobs.register_job(session, registration=registration(slurm_job_id), produced_at=T0)
        a0 = await jobs.create_attempt(
            session,
            job=job,
            attempt_index=0,
            state="RUNNING",
            nodes=["gpu-a01", "gpu-a02"],
            start_time=T0 + dt.timedelta(minutes=1),
            stdout_path=f"/logs/llama-{slurm_job_id}-0.out",
            stderr_path=f"/logs/llama-{slurm_job_id}-0.err",
            produced_at=T0 + dt.timedelta(minutes=1),
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
                source_time=T0 + dt.timedelta(minutes=20),
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
                source_time=T0 + dt.timedelta(minutes=31),
                detected_at=T0 + dt.timedelta(minutes=31, seconds=2),
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
            produced_at=T0 + dt.timedelta(minutes=31, seconds=2),
        )
        await jobs.update_attempt(
            session,
            attempt=a0,
            job=job,
            state="FAILED",
            exit_code=1,
            end_time=T0 + dt.timedelta(minutes=32),
            ended_reason="NonZeroExitCode",
            produced_at=T0 + dt.timedelta(minutes=32),
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
            created_at=T0 + dt.timedelta(minutes=32, seconds=5),
            updated_at=T0 + dt.timedelta(minutes=32, seconds=5),
        )
        session.add(advice)
        await session.flush()
        for i, step in enumerate(("requeue_hold", "update_exclusions", "release")):
            started = T0 + dt.timedelta(minutes=33, seconds=i * 3)
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
            produced_at=T0 + dt.timedelta(minutes=34),
        )
        a1 = await jobs.create_attempt(
            session,
            job=job,
            attempt_index=1,
            state="PENDING",
            produced_at=T0 + dt.timedelta(minutes=35),
            stdout_path=f"/logs/llama-{slurm_job_id}-1.out",
        )
        if second_running:
            await jobs.update_attempt(
                session,
                attempt=a1,
                job=job,
                state="RUNNING",
                nodes=["gpu-a03", "gpu-a04"],
                start_time=T0 + dt.timedelta(minutes=40),
                produced_at=T0 + dt.timedelta(minutes=40),
            )
        refused = await jobs.register_job(
            session,
            registration=registration(
                slurm_job_id + 1,
                enrolment="ENVIRONMENT_MISMATCH",
                enrolment_reason="environment 'prod' is not 'test-env'",
                workflow_key=None,
                policy_valid=True,
            ),
        )
        return Seeded(
            workflow_id=job.workflow_id,
            job_id=job.id,
            slurm_job_id=slurm_job_id,
            attempt_ids=[a0.id, a1.id],
            attempt_uuids=[a0.uuid, a1.uuid],
            advice_id=advice.id,
            refused_job_id=refused.slurm_job_id,
        )
