"""Logs on the real Slurm lab: evidence lands on the right attempt across a requeue; hangs are detected.

Observer, collector and watcher run against the lab (3 nodes) and the test database, ticked by the
test. Two ways for a job to keep attempts apart, both as docs/detectors.md tells job authors:
per-attempt files `train-<jobid>-<attempt>.log` in a collected log directory, or one shared
`--open-mode=append` file with `log_file_paths_shared_across_attempts: true`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from sqlalchemy import select

from app.evidence.models import Anomaly, Checkpoint, LogSource
from app.infra.context import AppContext
from app.jobs.models import Attempt
from app.slurm.cli_scheduler import CliScheduler
from tests.plugins.slurm_lab import SlurmLab
from worker.collector import Collector
from worker.observer import Observer
from worker.watcher import Watcher

pytestmark = pytest.mark.slurm

TS = "ts() { date -u +%Y-%m-%dT%H:%M:%S.%NZ; }"
PRETRAIN = 'echo "[$(ts)] [before the start of training step] datetime: $(ts)"'
ITERATION = 'echo "[$(ts)] iteration $1/  100 | elapsed time per iteration (ms): 1000.0 | lm loss: 2.3E+00 |"'
SAVED = 'echo "[$(ts)]   successfully saved checkpoint from iteration     1 to /ckpt/run [ t 1/1, p 1/1 ]"'
LOADED = 'echo "[$(ts)]   successfully loaded checkpoint from /ckpt/run [ t 1/1, p 1/1 ] at iteration 1"'
CRASH = 'echo "[$(ts)] RuntimeError: CUDA error: an illegal memory access was encountered"'
XID = (
    'echo "$(date "+%b %e %H:%M:%S") node2 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, '
    'name=python, GPU has fallen off the bus."'
)


def comment(workflow: str, **extra) -> str:
    body = {
        "workflow_id": workflow,
        "environment": "test-env",
        "mode": "observe",
        "auto_resume_mode": "requeue",
        "max_requeue_times": 2,
        **extra,
    }
    return json.dumps({"APS": body}, separators=(",", ":"))


def script(policy: str, body: str, *, output: str = "out-%j.log", append: bool = False) -> str:
    return "\n".join(
        [
            "#!/bin/bash",
            "#SBATCH --job-name=logs-test",
            "#SBATCH --requeue",
            f"#SBATCH --comment='{policy}'",
            f"#SBATCH --output={output}",
            *(["#SBATCH --open-mode=append"] if append else []),
            TS,
            "step() { " + ITERATION + "; }",
            body,
            "",
        ]
    )


class Stack:
    """Observer (ticked by the test), collector and watcher (running as services) over the lab."""

    def __init__(self, ctx: AppContext, lab: SlurmLab, log_dir: Path) -> None:
        settings = dataclasses.replace(
            ctx.settings, log_dirs=(str(log_dir),), hang_query_delay=2.0, collector_poll_interval=0.3
        )
        self.log_dir = log_dir
        self.ctx = dataclasses.replace(ctx, settings=settings)
        self.observer = Observer(self.ctx, CliScheduler(settings, env=lab.env()))
        self.collector = Collector(self.ctx, use_inotify=False)
        self.watcher = Watcher(self.ctx)
        self.observer.on_change = self.collector.poke

    def start(self) -> None:
        """Collector and watcher run as the worker runs them: their own loops, not behind a slow squeue."""
        self.collector.start()
        self.watcher.start()

    async def tick(self) -> None:
        await self.observer.tick()

    async def until(
        self, condition: Callable[[], Awaitable[bool]], timeout: float = 40.0, what: str = "condition"
    ) -> None:
        deadline = time.monotonic() + timeout
        while True:
            await self.tick()
            if await condition():
                return
            assert time.monotonic() < deadline, f"{what} not reached in {timeout} s"
            await asyncio.sleep(0.3)

    async def attempts(self, job_id: int) -> list[Attempt]:
        async with self.ctx.sessions() as session:
            return list(
                (
                    await session.scalars(
                        select(Attempt).where(Attempt.slurm_job_id == job_id).order_by(Attempt.attempt_index)
                    )
                ).all()
            )

    async def evidence(self, job_id: int) -> tuple[dict[int, list[str]], dict[int, list[str]]]:
        """attempt index -> anomaly categories, attempt index -> checkpoint kinds."""
        async with self.ctx.sessions() as session:
            found = (
                await session.execute(
                    select(Anomaly.category, Attempt.attempt_index)
                    .join(Attempt, Attempt.id == Anomaly.attempt_id)
                    .where(Attempt.slurm_job_id == job_id)
                    .order_by(Anomaly.id)
                )
            ).all()
            saved = (
                await session.execute(
                    select(Checkpoint.kind, Attempt.attempt_index)
                    .join(Attempt, Attempt.id == Checkpoint.attempt_id)
                    .where(Attempt.slurm_job_id == job_id)
                    .order_by(Checkpoint.id)
                )
            ).all()
        anomalies: dict[int, list[str]] = {}
        checkpoints: dict[int, list[str]] = {}
        for category, index in found:
            anomalies.setdefault(index, []).append(category)
        for kind, index in saved:
            checkpoints.setdefault(index, []).append(kind)
        return anomalies, checkpoints

    async def close(self) -> None:
        await self.collector.stop()
        await self.watcher.stop()


@pytest.fixture
async def stack(ctx: AppContext, slurm_lab: SlurmLab):
    log_dir = slurm_lab.test_dir() / f"logs-{uuid.uuid4().hex[:6]}"
    log_dir.mkdir(parents=True)
    built = Stack(ctx, slurm_lab, log_dir)
    already = len(slurm_lab.submitted)
    built.start()
    yield built
    await built.close()
    # The lab has 6 CPUs shared by every test: never leave sleeping jobs behind for the next one.
    mine = [str(job_id) for job_id in slurm_lab.submitted[already:]]
    if mine:
        subprocess.run(["scancel", *mine], env=slurm_lab.env(), capture_output=True, timeout=30, check=False)


async def _requeue_and_check(stack: Stack, slurm_lab: SlurmLab, job_id: int) -> None:
    async def first_attempt_evidence() -> bool:
        anomalies, checkpoints = await stack.evidence(job_id)
        return anomalies.get(0) == ["CUDA_ERROR"] and checkpoints.get(0) == ["saved"]

    await stack.until(first_attempt_evidence, what="attempt 0's checkpoint and crash")
    subprocess.run(["scontrol", "requeue", str(job_id)], env=slurm_lab.env(), check=True, timeout=15)

    async def second_attempt_evidence() -> bool:
        anomalies, checkpoints = await stack.evidence(job_id)
        return anomalies.get(1) == ["XID"] and checkpoints.get(1) == ["loaded"]

    await stack.until(second_attempt_evidence, timeout=90, what="attempt 1's checkpoint and Xid")
    anomalies, checkpoints = await stack.evidence(job_id)
    assert anomalies == {0: ["CUDA_ERROR"], 1: ["XID"]}  # nothing of attempt 1 on attempt 0 or the reverse
    assert checkpoints == {0: ["saved"], 1: ["loaded"]}
    a0, a1 = (await stack.attempts(job_id))[:2]
    assert a0.attempt_index == 0 and a1.attempt_index == 1


async def test_per_attempt_files_in_a_log_directory_across_a_requeue(stack: Stack, slurm_lab: SlurmLab) -> None:
    log_dir = stack.log_dir
    body = "\n".join(
        [
            f"LOG={log_dir}/train-$SLURM_JOB_ID-${{SLURM_RESTART_COUNT:-0}}.log",
            'if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then',
            f'  {{ {PRETRAIN}; step 1; {SAVED}; {CRASH}; }} >> "$LOG"',
            "else",
            f'  {{ {PRETRAIN}; {LOADED}; {XID}; }} >> "$LOG"',
            "fi",
            "sleep 300",
        ]
    )
    job_id = slurm_lab.submit(script(comment(f"wf-{uuid.uuid4().hex[:6]}"), body))
    await _requeue_and_check(stack, slurm_lab, job_id)
    async with stack.ctx.sessions() as session:
        owned = (
            await session.execute(
                select(LogSource.path, Attempt.attempt_index)
                .join(Attempt, Attempt.id == LogSource.attempt_id)
                .where(Attempt.slurm_job_id == job_id)
            )
        ).all()
    named = {Path(path).name: index for path, index in owned if "train-" in path}
    assert named == {f"train-{job_id}-0.log": 0, f"train-{job_id}-1.log": 1}


async def test_shared_append_file_with_label_and_time_across_a_requeue(stack: Stack, slurm_lab: SlurmLab) -> None:
    body = "\n".join(
        [
            'if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then',
            f"  {PRETRAIN}; step 1; {SAVED}; {CRASH}",  # attempt 0: source timestamps only
            "else",
            # attempt 1: a slurm_job_attempt label on each line (the syslog-style Xid line has no year, the label
            # decides)
            f'  {{ {LOADED}; {XID}; }} | sed "s/^/slurm_job_attempt=${{SLURM_RESTART_COUNT}} /"',
            "fi",
            "sleep 300",
        ]
    )
    policy = comment(f"wf-{uuid.uuid4().hex[:6]}", log_file_paths_shared_across_attempts=True)
    job_id = slurm_lab.submit(script(policy, body, output="shared-%j.log", append=True))
    await _requeue_and_check(stack, slurm_lab, job_id)
    async with stack.ctx.sessions() as session:
        shared = (await session.scalars(select(LogSource).where(LogSource.path.like(f"%shared-{job_id}.log")))).all()
    assert len(shared) == 1 and shared[0].shared and shared[0].attempt_id is None


async def test_silent_job_raises_no_progress_and_a_printing_one_does_not(stack: Stack, slurm_lab: SlurmLab) -> None:
    policy = comment(
        f"wf-{uuid.uuid4().hex[:6]}",
        anomaly_detection_config={
            "log_based_timeout_threshold_pretraining": 5,
            "log_based_timeout_threshold_trainingloop": 5,
        },
    )
    silent = slurm_lab.submit(script(policy, f"{PRETRAIN}; step 1; step 2; sleep 120"))
    busy = slurm_lab.submit(script(policy, f"{PRETRAIN}; for i in $(seq 1 60); do step $i; sleep 1; done"))

    async def silent_flagged() -> bool:
        anomalies, _ = await stack.evidence(silent)
        return bool(anomalies.get(0))

    await stack.until(silent_flagged, timeout=60, what="NO_PROGRESS on the silent job")
    async with stack.ctx.sessions() as session:
        anomaly = await session.scalar(
            select(Anomaly).join(Attempt, Attempt.id == Anomaly.attempt_id).where(Attempt.slurm_job_id == silent)
        )
    assert anomaly is not None
    assert anomaly.kind == "NO_PROGRESS" and anomaly.category == "NO_OUTPUT_TRAININGLOOP"
    last_output = dt.datetime.fromisoformat(anomaly.details["lastOutputAt"])
    delay = (anomaly.detected_at - last_output).total_seconds()
    # Never before threshold + query delay; how soon after is a speed figure (bench/), not a test bound.
    assert delay >= 5 + 2, delay
    until = time.monotonic() + 10
    while time.monotonic() < until:  # the printing job stays quiet in the anomaly table
        await stack.tick()
        await asyncio.sleep(0.3)
    anomalies, _ = await stack.evidence(busy)
    assert anomalies == {}
    [a_busy] = await stack.attempts(busy)
    assert a_busy.state == "RUNNING"
