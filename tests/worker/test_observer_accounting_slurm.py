"""Jobs that leave squeue and job ids Slurm hands out again, on every release (slurmdbd on MariaDB).

Both need a slurmctld that forgets its jobs, which the shared lab must never do: these tests run on
the scratch lab of each release (1 node, slurmdbd, its own ports), whose state they wipe the way a
controller that lost StateSaveLocation would: every job leaves squeue at once and ids start at 1.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable

import pytest
from sqlalchemy import select

from app.infra.context import AppContext
from app.jobs.models import Attempt, Job
from app.slurm.cli_scheduler import CliScheduler
from tests.plugins.slurm_lab import SlurmLab
from worker.observer import Observer

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_versions]


def policy(workflow: str) -> str:
    body = {"workflow_id": workflow, "environment": "test-env", "mode": "observe", "auto_resume_mode": "requeue"}
    return json.dumps({"APS": body}, separators=(",", ":"))


def script(comment: str, body: str) -> str:
    return "\n".join(
        ["#!/bin/bash", "#SBATCH --job-name=acct-test", "#SBATCH --requeue", f"#SBATCH --comment='{comment}'", body, ""]
    )


async def tick_until(observer: Observer, condition: Callable[[], Awaitable[bool]], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        await observer.tick()
        if await condition():
            return
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.3)


async def attempts(ctx: AppContext, job_id: int) -> list[Attempt]:
    async with ctx.sessions() as session:
        query = (
            select(Attempt)
            .join(Job, Job.id == Attempt.job_id)
            .where(Attempt.slurm_job_id == job_id, Job.retired_at.is_(None))
            .order_by(Attempt.attempt_index)
        )
        return list((await session.scalars(query)).all())


async def incarnations(ctx: AppContext, job_id: int) -> list[Job]:
    async with ctx.sessions() as session:
        query = select(Job).where(Job.slurm_job_id == job_id).order_by(Job.incarnation)
        return list((await session.scalars(query)).all())


def wait_accounted(lab: SlurmLab, job_id: int, state: str, timeout: float = 60.0) -> None:
    """Until slurmdbd has the job's final row (slurmctld sends it a moment after the job ends)."""
    deadline = time.monotonic() + timeout
    rows = ""
    while time.monotonic() < deadline:
        rows = subprocess.run(
            [str(lab.bin_dir / "sacct"), "-n", "-X", "-P", "-j", str(job_id), "-o", "State"],
            env=lab.env(),
            capture_output=True,
            text=True,
            timeout=15,
            check=False,
        ).stdout
        if state in rows.split():
            return
        time.sleep(0.3)
    raise AssertionError(f"accounting never recorded job {job_id} as {state}: {rows!r}")


@pytest.fixture
def observer(ctx: AppContext, slurm_scratch_lab: SlurmLab) -> Observer:
    return Observer(ctx, CliScheduler(ctx.settings, env=slurm_scratch_lab.env()))


async def test_job_that_leaves_squeue_gets_its_final_state_from_accounting(
    ctx: AppContext, slurm_scratch_lab: SlurmLab, observer: Observer
) -> None:
    lab = slurm_scratch_lab
    job_id = lab.submit(script(policy(f"wf-{uuid.uuid4().hex[:6]}"), "sleep 2; exit 3"))

    async def running() -> bool:
        found = await attempts(ctx, job_id)
        return bool(found) and found[0].state == "RUNNING"

    await tick_until(observer, running)
    lab.wait_state(job_id, "FAILED")  # the observer does not look meanwhile
    wait_accounted(lab, job_id, "FAILED")
    lab.wipe_state()
    assert lab.state(job_id) == "", "the job must have left squeue"

    async def ended() -> bool:
        found = await attempts(ctx, job_id)
        return bool(found) and found[0].state != "RUNNING"

    await tick_until(observer, ended)
    [a0] = await attempts(ctx, job_id)
    assert (a0.state, a0.exit_code) == ("FAILED", 3)
    assert "final state from accounting" in (a0.ended_reason or "")


async def test_reused_job_id_is_a_new_job_with_its_own_accounting(
    ctx: AppContext, slurm_scratch_lab: SlurmLab, observer: Observer
) -> None:
    lab = slurm_scratch_lab
    lab.wipe_state()  # ids start at 1 again
    first_comment = policy(f"wf-first-{uuid.uuid4().hex[:6]}")
    first = lab.submit(script(first_comment, "exit 0"))
    lab.wait_state(first, "COMPLETED")

    async def first_recorded() -> bool:
        found = await attempts(ctx, first)
        return bool(found) and found[0].state == "COMPLETED"

    await tick_until(observer, first_recorded)
    wait_accounted(lab, first, "COMPLETED")
    lab.wipe_state()  # the controller forgets: the next job gets the same id
    second_comment = policy(f"wf-second-{uuid.uuid4().hex[:6]}")
    second = lab.submit(script(second_comment, "sleep 6; exit 4"))
    assert second == first, "after losing its state slurmctld hands out the same id again"

    async def second_registered() -> bool:
        return len(await incarnations(ctx, second)) == 2

    await tick_until(observer, second_registered)
    old, new = await incarnations(ctx, second)
    assert old.retired_at is not None and new.retired_at is None
    assert (old.comment, new.comment) == (first_comment, second_comment)
    assert new.incarnation == old.incarnation + 1

    # the second job also leaves squeue unseen; accounting now has two jobs with this id, and the
    # final state must be the second one's (exit 4), never the first one's COMPLETED row
    await tick_until(observer, lambda: _has_attempt(ctx, second))
    lab.wait_state(second, "FAILED")
    wait_accounted(lab, second, "FAILED")
    lab.wipe_state()

    async def ended() -> bool:
        found = await attempts(ctx, second)
        return bool(found) and found[0].state not in {"RUNNING", "PENDING"}

    await tick_until(observer, ended)
    [a0] = await attempts(ctx, second)
    assert (a0.state, a0.exit_code) == ("FAILED", 4), (a0.state, a0.exit_code, a0.ended_reason)


async def _has_attempt(ctx: AppContext, job_id: int) -> bool:
    return bool(await attempts(ctx, job_id))
