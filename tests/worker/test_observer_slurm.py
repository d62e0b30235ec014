"""The observer against the real Slurm lab: registration, failures, requeues, enrolment verdicts, outages."""

import asyncio
import dataclasses
import json
import os
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from sqlalchemy import select

from app.infra.context import AppContext
from app.jobs.models import Attempt, Job
from app.slurm.cli_scheduler import CliScheduler
from app.slurm.errors import TransientSchedulerError
from tests.plugins.slurm_lab import SlurmLab, lab_lock
from worker.observer import Observer

pytestmark = pytest.mark.slurm


def policy_comment(workflow: str, environment: str = "test-env", **extra) -> str:
    body = {
        "workflow_id": workflow,
        "environment": environment,
        "mode": "observe",
        "auto_resume_mode": "requeue",
        "max_requeue_times": 1,
        **extra,
    }
    return json.dumps({"APS": body}, separators=(",", ":"))


def script(comment: str, body: str, *, requeue: bool = True) -> str:
    return "\n".join(
        [
            "#!/bin/bash",
            "#SBATCH --job-name=observer-test",
            "#SBATCH --requeue" if requeue else "#SBATCH --no-requeue",
            f"#SBATCH --comment='{comment}'",
            "#SBATCH --output=out-%j.log",
            "#SBATCH --error=err-%j.log",
            body,
            "",
        ]
    )


async def tick_until(observer: Observer, condition: Callable[[], Awaitable[bool]], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        await observer.tick()
        if await condition():
            return
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.25)


async def attempts(ctx: AppContext, job_id: int) -> list[Attempt]:
    async with ctx.sessions() as session:
        return list(
            (
                await session.scalars(
                    select(Attempt).where(Attempt.slurm_job_id == job_id).order_by(Attempt.attempt_index)
                )
            ).all()
        )


async def job_record(ctx: AppContext, job_id: int) -> Job | None:
    async with ctx.sessions() as session:
        return await session.scalar(select(Job).where(Job.slurm_job_id == job_id, Job.retired_at.is_(None)))


@pytest.fixture
def observer(ctx: AppContext, slurm_lab: SlurmLab) -> Observer:
    return Observer(ctx, CliScheduler(ctx.settings, env=slurm_lab.env()))


@pytest.mark.slurm_versions
async def test_enrolled_job_fails_and_is_requeued(ctx: AppContext, slurm_lab: SlurmLab, observer: Observer) -> None:
    workflow = f"wf-{uuid.uuid4().hex[:6]}"
    job_id = slurm_lab.submit(script(policy_comment(workflow), "echo start; sleep 8; exit 1"))
    # When the job starts depends on how busy the shared lab is; what is tested is that the very
    # next observer tick after Slurm shows RUNNING records attempt 0 as RUNNING.
    slurm_lab.wait_state(job_id, "RUNNING")
    await observer.tick()
    [a0] = await attempts(ctx, job_id)
    assert a0.state == "RUNNING"
    assert a0.stdout_path is not None
    assert a0.attempt_index == 0 and a0.nodes and a0.stdout_path.endswith(f"out-{job_id}.log")
    assert a0.requeue_eligible is True

    async def failed() -> bool:
        return (await attempts(ctx, job_id))[0].state == "FAILED"

    await tick_until(observer, failed)
    [a0] = await attempts(ctx, job_id)
    assert a0.exit_code == 1 and a0.end_time is not None

    subprocess.run(["scontrol", "requeue", str(job_id)], env=slurm_lab.env(), check=True, timeout=15)

    async def second() -> bool:
        return len(await attempts(ctx, job_id)) == 2

    await tick_until(observer, second)
    a0, a1 = await attempts(ctx, job_id)
    assert (a0.state, a0.exit_code) == ("FAILED", 1)
    assert a0.stdout_path is not None
    assert a0.stdout_path.endswith(f"out-{job_id}.log")
    assert a1.attempt_index == 1 and a1.stdout_path is None  # Slurm reports attempt 0's path again: stale
    record = await job_record(ctx, job_id)
    assert record is not None
    assert record.workflow_id is not None and record.restart_count == 1


@pytest.mark.parametrize(
    ("comment", "expected"),
    [
        ("plain comment for humans", None),
        ('{"aps":{"workflow_id":"x","environment":"test-env"}}', "NOT_ENROLLED"),
        ('{"APS":{"workflow_id":"x",', "NOT_ENROLLED"),
        (policy_comment("elsewhere", environment="other-env"), "ENVIRONMENT_MISMATCH"),
    ],
)
async def test_enrolment_verdicts_on_real_jobs(ctx, slurm_lab, observer, comment, expected) -> None:
    job_id = slurm_lab.submit(script(comment, "sleep 1"))
    slurm_lab.wait_state(job_id, {"RUNNING", "COMPLETED"})
    await observer.tick()
    record = await job_record(ctx, job_id)
    if expected is None:
        assert record is None
    else:
        assert record is not None and record.enrolment == expected and record.enrolment_reason
        assert await attempts(ctx, job_id) == []


def _alive(pid: int) -> bool:
    """Whether the process runs (a zombie waiting for its parent does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@pytest.mark.slurm_versions
async def test_slurmctld_outage_loses_nothing(ctx: AppContext, slurm_lab: SlurmLab, observer: Observer) -> None:
    # 15 s keeps the suite fast; RECOVERY_TEST_OUTAGE_SECONDS=60 reproduces the one-minute outage.
    outage = float(os.environ.get("RECOVERY_TEST_OUTAGE_SECONDS", "15"))
    # held from before the job starts: a wait for the lock must not eat into the job's life
    with lab_lock():  # no other test process brings the lab up during the outage
        job_id = slurm_lab.submit(script(policy_comment(f"wf-{uuid.uuid4().hex[:6]}"), f"sleep {int(outage) + 40}"))

        async def running() -> bool:
            found = await attempts(ctx, job_id)
            return bool(found) and found[0].state == "RUNNING"

        await tick_until(observer, running)
        # A timeout longer than squeue's own connection retries (~10 s), so that Slurm's answer decides:
        # 22.05 exits 0 with an `errors` array and no jobs, 24.11 and 26.05 exit 1. Both are an outage.
        patient = CliScheduler(dataclasses.replace(ctx.settings, slurm_command_timeout=30), env=slurm_lab.env())
        observer.scheduler = patient
        pid = slurm_lab.daemon_pid("slurmctld")
        subprocess.run(["kill", "-TERM", str(pid)], check=True)
        try:
            # slurmctld still answers while it saves its state on the way down: the outage starts when it is gone
            gone_by = time.monotonic() + 30
            while _alive(pid) and time.monotonic() < gone_by:
                await asyncio.sleep(0.1)
            assert not _alive(pid), "slurmctld did not stop within 30 s of SIGTERM"
            deadline = time.monotonic() + outage
            failures = 0
            while time.monotonic() < deadline:
                with pytest.raises(TransientSchedulerError) as caught:
                    await observer.tick()
                assert "timed out" not in str(caught.value)
                failures += 1
                await asyncio.sleep(0.5)
            assert failures > 0
            [a0] = await attempts(ctx, job_id)
            assert a0.state == "RUNNING"
        finally:
            assert slurm_lab.up() == 0
    await observer.tick()
    [a0] = await attempts(ctx, job_id)
    assert a0.state == "RUNNING"
    async with ctx.sessions() as session:
        from app.audit.models import AuditEvent

        events = (await session.scalars(select(AuditEvent).where(AuditEvent.component == "observer"))).all()
    types = [event.event_type for event in events]
    assert types.count("scheduler.unreachable") == 1 and types.count("scheduler.reachable") == 1
    [down] = [event for event in events if event.event_type == "scheduler.unreachable"]
    # Slurm's own answer, not our timeout: 22.05's errors array, or (24.11, 26.05) "Unable to contact
    # slurm controller" / "Connection reset by peer" while it shuts down
    said = down.message.lower()
    assert "timed out" not in said and ("answered with errors" in said or "slurm_load_jobs" in said), down.message
