"""What the lab end-to-end tests share: APS batch scripts, a real worker (in-process or a `recovery worker`
process), polling."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import re
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from sqlalchemy import select

from app.advice.models import Advice, SchedulerAction
from app.infra.context import AppContext
from app.jobs.models import Attempt
from app.slurm.cli_scheduler import CliScheduler
from tests.plugins.slurm_lab import SlurmLab
from worker.observer import Observer
from worker.registry import build_services
from worker.runner import WorkerRunner

T = TypeVar("T")


def unique_environment() -> str:
    """Each test gets its own environment, so no other job on the shared lab is ever enrolled (or acted on)."""
    return f"e2e-{uuid.uuid4().hex[:8]}"


def policy_comment(environment: str, *, mode: str = "act", max_requeue_times: int = 1) -> str:
    """The user guide's directive, with mode act unless told otherwise."""
    body = {
        "workflow_id": f"wf-{uuid.uuid4().hex[:6]}",
        "environment": environment,
        "mode": mode,
        "auto_resume_mode": "requeue",
        "max_requeue_times": max_requeue_times,
    }
    return json.dumps({"APS": body}, separators=(",", ":"))


def batch_script(comment: str, body: str, *, name: str = "e2e") -> str:
    """The user guide's two directives on top of a script; every attempt appends to one output file."""
    return "\n".join(
        [
            "#!/bin/bash",
            f"#SBATCH --job-name={name}",
            "#SBATCH --requeue",
            f"#SBATCH --comment='{comment}'",
            "#SBATCH --output=out-%j.log",
            "#SBATCH --open-mode=append",
            body,
            "",
        ]
    )


def lab_context(ctx: AppContext, environment: str, **changes: Any) -> AppContext:
    """The test's database with settings for a fast worker in this test's own environment."""
    values: dict[str, Any] = dict(
        environment=environment, acknowledge_scheduler_actions=True, poll_interval=0.3, lease_seconds=3.0
    )
    values.update(changes)
    settings = dataclasses.replace(ctx.settings, **values)
    return AppContext(settings=settings, engine=ctx.engine, sessions=ctx.sessions)


@contextlib.asynccontextmanager
async def running_worker(ctx: AppContext, lab: SlurmLab, *, holder: str | None = None) -> AsyncIterator[WorkerRunner]:
    """The real services (observer, advisor, controller, watchdog) under a WorkerRunner, in this process."""
    # the slurmrestd twin (RECOVERY_TEST_SLURM_API=rest) brings its REST adapter
    make = getattr(lab, "scheduler", None)
    scheduler = make(ctx.settings) if make else CliScheduler(ctx.settings, env=lab.env())
    runner = WorkerRunner(ctx, build_services(ctx, scheduler=scheduler), holder=holder)
    task = asyncio.create_task(runner.run())
    try:
        await watching(runner)
        yield runner
    finally:
        runner.stop()
        await asyncio.wait_for(task, 30)


async def watching(runner: WorkerRunner) -> None:
    """Until the worker is up: a standby after its first try for the lease, the holder after its observer's first
    complete look at Slurm. A job that ends before that look was never seen by this installation and is adopted
    (history only, app/domain/admission/adoption.py), so tests that expect a decision submit their jobs after it."""
    await asyncio.wait_for(runner.refreshed.wait(), 60)
    observer = next((s for s in runner.services if isinstance(s, Observer)), None)
    if not runner.has_lease or observer is None:
        return

    async def looked() -> bool:
        return observer.state.watching_since is not None

    await eventually(looked, timeout=60, what="the observer's first complete look at Slurm")


async def eventually(probe: Callable[[], Awaitable[T | None]], *, timeout: float = 180.0, what: str = "condition") -> T:
    """Poll `probe` until it returns something truthy (no timing is asserted; the timeout only bounds a hang)."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(0.2)
    raise AssertionError(f"{what} not reached within {timeout:.0f} s (last: {last!r})")


async def attempts(ctx: AppContext, job_id: int) -> list[Attempt]:
    async with ctx.sessions() as session:
        return list(
            (
                await session.scalars(
                    select(Attempt).where(Attempt.slurm_job_id == job_id).order_by(Attempt.attempt_index)
                )
            ).all()
        )


async def advice_list(ctx: AppContext, job_id: int) -> list[Advice]:
    async with ctx.sessions() as session:
        return list(
            (
                await session.scalars(
                    select(Advice).where(Advice.slurm_job_id == job_id).order_by(Advice.attempt_index)
                )
            ).all()
        )


async def milestones(ctx: AppContext, job_id: int) -> list[SchedulerAction]:
    async with ctx.sessions() as session:
        query = (
            select(SchedulerAction)
            .join(Advice, Advice.id == SchedulerAction.advice_id)
            .where(Advice.slurm_job_id == job_id)
            .order_by(SchedulerAction.id)
        )
        return list((await session.scalars(query)).all())


async def attempt_running(ctx: AppContext, job_id: int, index: int) -> Attempt | None:
    found = [a for a in await attempts(ctx, job_id) if a.attempt_index == index and a.state == "RUNNING" and a.nodes]
    return found[0] if found else None


async def advice_done(ctx: AppContext, job_id: int, index: int) -> Advice | None:
    found = [a for a in await advice_list(ctx, job_id) if a.attempt_index == index and a.disposition != "PENDING"]
    return found[0] if found else None


# ---------------------------------------------------------------- job arrays

_ARRAY_KEY_SPLIT = re.compile(r" (?=[A-Za-z][\w:/]*=)")

# Task $CRASH_TASK fails on its first attempt; every other task (and the retry) runs for a while and succeeds.
ARRAY_BODY = """\
if [ "$SLURM_ARRAY_TASK_ID" = "$CRASH_TASK" ] && [ -z "$SLURM_RESTART_COUNT" ]; then
  echo "task $SLURM_ARRAY_TASK_ID crashing"; sleep 1; exit 1
fi
echo "task $SLURM_ARRAY_TASK_ID attempt ${SLURM_RESTART_COUNT:-0} on $SLURMD_NODENAME"
sleep "$SIBLING_SECONDS"
"""


def array_tasks(lab: SlurmLab, array_id: int) -> dict[int, dict[str, str]]:
    """`scontrol show job -o <array id>`: one line per task, keyed by task id."""
    result = subprocess.run(
        ["scontrol", "show", "job", "-o", str(array_id)],
        env=lab.env(),
        capture_output=True,
        text=True,
        timeout=15,
        check=True,
    )
    tasks: dict[int, dict[str, str]] = {}
    for line in result.stdout.splitlines():
        fields = dict(part.partition("=")[::2] for part in _ARRAY_KEY_SPLIT.split(line.strip()) if "=" in part)
        if fields.get("ArrayTaskId", "").isdigit():
            tasks[int(fields["ArrayTaskId"])] = fields
    return tasks
