"""Recovery latency on the real Slurm lab: job exit -> our `scontrol release` returning, and job exit -> the next
attempt RUNNING, beside the same job requeued by Slurm's own `RequeueExit=75`, in the same run.

    .venv/bin/python bench/recovery_latency.py                    # 5 runs, on a lab of its own
    .venv/bin/python bench/recovery_latency.py --smoke            # 1 run, 45 s collective timeout
    .venv/bin/python bench/recovery_latency.py --shared-lab       # on the default lab ($RECOVERY_LAB_DIR)

The worker (observer + advisor + controller + watchdog) runs in this process on a temporary
SQLite database, acting (ceiling on) for a benchmark-only environment name. Each run submits
two copies of one script at the same time: an enrolled one that exits 1 (recovered by us) and
a non-enrolled one that exits 75 (requeued by Slurm). Both write `date +%s.%N` just before the
exit and at the start of the retry, so every time is measured on the same clock. Both retries
wait Slurm's BeginTime (cred_expire, 5 s in the lab), so the RUNNING ratio shows what our path
adds on top of Slurm's own requeue. Needs root and the lab packages (`bash .ci/bootstrap`). By default
it starts a 3-node lab of its own with `RequeueExit=75` (in `<lab dir>-latency`, ports shifted by
$RECOVERY_BENCH_LAB_PORT_OFFSET, default 7000) and stops it at the end, so a shared lab is never
reconfigured; `--shared-lab` runs on the default lab instead, and `--configure-lab` adds RequeueExit=75
to it (lab.sh then restarts its slurmctld and slurmd, which other users of that lab will notice).
Prints numbers; asserts nothing about time.

The partial-failure case submits, at the same time, an enrolled and a non-enrolled copy of a job whose rank 0
prints a crash line and dies while the rest blocks in a collective until a "collective timeout" (60 s; 45 s in
smoke mode) and then exits 75: both clocks start at the crash line, ours ends when our next attempt runs, Slurm's
when RequeueExit's next attempt runs after the job finally exits. Ends with `figure` lines (bench/figures.py).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import func, select  # noqa: E402

from app.advice.models import Advice, SchedulerAction  # noqa: E402
from app.infra.config import Settings  # noqa: E402
from app.infra.context import AppContext  # noqa: E402
from app.infra.migrate import upgrade  # noqa: E402
from app.lab.cli import default_lab_dir  # noqa: E402
from app.lab.cli import run as lab_run  # noqa: E402
from app.slurm.cli_scheduler import CliScheduler  # noqa: E402
from bench.figures import figure  # noqa: E402
from worker.registry import build_services  # noqa: E402
from worker.runner import WorkerRunner  # noqa: E402

REQUEUE_EXIT = 75
SCRIPT = """#!/bin/bash
#SBATCH --job-name={name}
#SBATCH --requeue
#SBATCH --comment='{comment}'
#SBATCH --output=out-%j.log
#SBATCH --open-mode=append
if [ -z "$SLURM_RESTART_COUNT" ]; then
  sleep 1
  date +%s.%N > "exit-$SLURM_JOB_ID"
  exit {code}
fi
date +%s.%N > "start-$SLURM_JOB_ID"
"""
# A partial failure: rank 0 prints a crash line and dies while the other ranks block in a collective until the
# "collective timeout" (the NCCL timeout of real jobs, 10-30 minutes) and only then does the job exit. Enrolled, the
# crash line is recovered while the job still runs; not enrolled, exit {code} is requeued by Slurm's RequeueExit.
PARTIAL_SCRIPT = """#!/bin/bash
#SBATCH --job-name={name}
#SBATCH --requeue
#SBATCH --comment='{comment}'
#SBATCH --output=out-%j.log
#SBATCH --open-mode=append
if [ -z "$SLURM_RESTART_COUNT" ]; then
  echo "[$(date -u '+%Y-%m-%d %H:%M:%S')] training ..."
  (
    sleep 1
    date +%s.%N > "crash-$SLURM_JOB_ID"
    echo "[$(date -u '+%Y-%m-%d %H:%M:%S')] [rank0]: RuntimeError: CUDA error: an illegal memory access was encountered"
    exit 1
  ) &
  rank0=$!
  sleep {timeout}
  wait $rank0
  echo "[$(date -u '+%Y-%m-%d %H:%M:%S')] [rank1]: Watchdog caught collective operation timeout"
  date +%s.%N > "exit-$SLURM_JOB_ID"
  exit {code}
fi
date +%s.%N > "start-$SLURM_JOB_ID"
"""


def own_lab() -> tuple[str, int]:
    """The directory and port offset of the lab this bench starts for itself."""
    return default_lab_dir() + "-latency", int(os.environ.get("RECOVERY_BENCH_LAB_PORT_OFFSET", "7000"))


def lab_up(extra_conf: str | None, lab_dir: str, port_offset: int | None) -> str:
    """Bring a lab up (optionally with extra slurm.conf lines); returns SLURM_CONF."""
    out = io.StringIO()
    if extra_conf is not None:
        os.environ["RECOVERY_LAB_EXTRA_CONF"] = extra_conf
    print(f"starting the lab in {lab_dir} ...", flush=True)
    if lab_run("up", nodes=3, lab_dir=lab_dir, port_offset=port_offset, out=out) != 0:
        raise SystemExit("`recovery lab up` failed (root and the lab packages are needed: bash .ci/bootstrap)")
    match = re.search(r"^export SLURM_CONF=(\S+)$", out.getvalue(), re.M)
    if not match:
        raise SystemExit(f"lab printed no SLURM_CONF: {out.getvalue()!r}")
    os.environ["SLURM_CONF"] = match.group(1)
    return match.group(1)


def requeue_exit_configured() -> bool:
    shown = subprocess.run(
        ["scontrol", "show", "config"], capture_output=True, text=True, timeout=30, check=False
    ).stdout
    match = re.search(r"^RequeueExit\s*=\s*(\S+)", shown, re.M)
    return match is not None and str(REQUEUE_EXIT) in match.group(1).split(",")


def submit(
    directory: Path, *, name: str, comment: str, code: int = 0, template: str = SCRIPT, timeout: float = 0
) -> int:
    script = directory / f"{name}-{uuid.uuid4().hex[:6]}.sh"
    script.write_text(template.format(name=name, comment=comment, code=code, timeout=timeout))
    result = subprocess.run(
        ["sbatch", "--parsable", f"--chdir={directory}", str(script)],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return int(result.stdout.strip().split(";", 1)[0])


async def wait_file(path: Path, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return float(path.read_text().strip())
        await asyncio.sleep(0.05)
    raise TimeoutError(f"{path} was not written within {timeout:.0f} s")


async def step_returned(ctx: AppContext, job_id: int, timeout: float, step: str = "release") -> float:
    """Wall-clock time one of our scheduler commands for the job (release by default) returned: its SUCCEEDED
    milestone."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        async with ctx.sessions() as session:
            finished = await session.scalar(
                select(SchedulerAction.finished_at)
                .join(Advice, Advice.id == SchedulerAction.advice_id)
                .where(
                    Advice.slurm_job_id == job_id,
                    SchedulerAction.step == step,
                    SchedulerAction.status == "SUCCEEDED",
                )
            )
        if finished is not None:
            return finished.timestamp()
        await asyncio.sleep(0.05)
    raise TimeoutError(f"no {step} of job {job_id} within {timeout:.0f} s")


async def one_run(
    ctx: AppContext, directory: Path, environment: str, baseline: bool, collective_timeout: float
) -> dict[str, float]:
    policy = json.dumps(
        {
            "APS": {
                "workflow_id": "bench",
                "environment": environment,
                "mode": "act",
                "auto_resume_mode": "requeue",
                "max_requeue_times": 1,
            }
        },
        separators=(",", ":"),
    )
    ours = submit(directory, name="bench-recovery", comment=policy, code=1)
    theirs = (
        submit(directory, name="bench-requeueexit", comment="benchmark baseline, not enrolled", code=REQUEUE_EXIT)
        if baseline
        else None
    )
    exited = await wait_file(directory / f"exit-{ours}", 120)
    released = await step_returned(ctx, ours, 120)
    requeued = await step_returned(ctx, ours, 5, "requeue_hold")
    async with ctx.sessions() as session:
        decided = await session.scalar(select(func.min(Advice.created_at)).where(Advice.slurm_job_id == ours))
        sent = await session.scalar(
            select(SchedulerAction.started_at)
            .join(Advice, Advice.id == SchedulerAction.advice_id)
            .where(Advice.slurm_job_id == ours, SchedulerAction.step == "requeue_hold")
        )
    started = await wait_file(directory / f"start-{ours}", 180)
    assert decided is not None and sent is not None  # the requeue-hold above returned, so both exist
    row = {
        "exit_to_advice": decided.timestamp() - exited,
        "exit_to_requeue_sent": sent.timestamp() - exited,
        "exit_to_requeue": requeued - exited,
        "exit_to_release": released - exited,
        "exit_to_running": started - exited,
    }
    if theirs is not None:
        their_exit = await wait_file(directory / f"exit-{theirs}", 120)
        their_start = await wait_file(directory / f"start-{theirs}", 180)
        row["requeueexit_exit_to_running"] = their_start - their_exit
        subprocess.run(
            ["scancel", str(theirs)], capture_output=True, timeout=30, check=False
        )  # RequeueExit would loop forever
    # The partial failure, ours and Slurm's, at the same time: both clocks start at the crash line.
    crashing = submit(
        directory, name="bench-partial", comment=policy, template=PARTIAL_SCRIPT, timeout=collective_timeout
    )
    stuck = (
        submit(
            directory,
            name="bench-partial-requeueexit",
            comment="benchmark baseline, not enrolled",
            code=REQUEUE_EXIT,
            template=PARTIAL_SCRIPT,
            timeout=collective_timeout,
        )
        if baseline
        else None
    )
    crashed = await wait_file(directory / f"crash-{crashing}", 120)
    row["crash_line_to_release"] = await step_returned(ctx, crashing, 120) - crashed
    row["crash_line_to_running"] = await wait_file(directory / f"start-{crashing}", 180) - crashed
    if stuck is not None:
        stuck_crash = await wait_file(directory / f"crash-{stuck}", 120)
        stuck_exit = await wait_file(directory / f"exit-{stuck}", collective_timeout + 120)
        stuck_start = await wait_file(directory / f"start-{stuck}", 180)
        row["requeueexit_partial_exit_to_running"] = stuck_start - stuck_exit
        row["requeueexit_partial_crash_line_to_running"] = stuck_start - stuck_crash
        subprocess.run(["scancel", str(stuck)], capture_output=True, timeout=30, check=False)
    return row


async def bench(runs: int, shared_lab: bool, configure_lab: bool, collective_timeout: float) -> int:
    if shared_lab:
        lab_dir, port_offset = default_lab_dir(), None
        lab_up("RequeueExit=75" if configure_lab else None, lab_dir, port_offset)
        return await measure(runs, lab_dir, collective_timeout)
    lab_dir, port_offset = own_lab()
    try:
        lab_up(f"RequeueExit={REQUEUE_EXIT}", lab_dir, port_offset)
        return await measure(runs, lab_dir, collective_timeout)
    finally:
        lab_run("down", lab_dir=lab_dir, port_offset=port_offset, out=io.StringIO())


async def measure(runs: int, lab_dir: str, collective_timeout: float) -> int:
    """Time `runs` recoveries, ours beside RequeueExit where the lab has it; prints the `figure` lines."""
    baseline = requeue_exit_configured()
    if not baseline:
        print("RequeueExit=75 is not configured in the lab: the Slurm baseline is skipped (use --configure-lab).")
    with tempfile.TemporaryDirectory(prefix="bench-recovery-", dir=lab_dir) as tmp:
        directory = Path(tmp)
        environment = f"bench-{uuid.uuid4().hex[:6]}"
        settings = Settings.build(
            data_dir=str(directory),
            database_url=f"sqlite+aiosqlite:///{directory}/bench.db",
            cluster="bench",
            environment=environment,
            acknowledge_scheduler_actions=True,
            # every run restarts the same workflow: the recovery budgets (app/fleet) would hold run 4 on
            budget_workflow_restarts=0,
            budget_cluster_restarts=0,
            poll_interval=0.2,
            lease_seconds=5.0,
        )
        ctx = AppContext.open(settings)
        await upgrade(ctx.engine)
        runner = WorkerRunner(ctx, build_services(ctx, scheduler=CliScheduler(settings)))
        task = asyncio.create_task(runner.run())
        rows = []
        try:
            for number in range(1, runs + 1):
                row = await one_run(ctx, directory, environment, baseline, collective_timeout)
                rows.append(row)
                print(f"run {number}: " + "  ".join(f"{key}={value:.2f}s" for key, value in row.items()), flush=True)
        finally:
            runner.stop()
            await task
            await ctx.close()
    print()
    print(f"median over {len(rows)} runs (poll interval {settings.poll_interval}s, lab cred_expire 5s):")
    med = {key: statistics.median(r[key] for r in rows) for key in rows[0]}
    nan = float("nan")
    print(f"  job exit -> our Advice decided            : {med['exit_to_advice']:.2f} s")
    print(f"  job exit -> our requeue-hold sent         : {med['exit_to_requeue_sent']:.2f} s")
    print(f"  job exit -> our requeue-hold returned     : {med['exit_to_requeue']:.2f} s (BeginTime counts from here)")
    print(f"  job exit -> our scontrol release returned : {med['exit_to_release']:.2f} s")
    print(f"  job exit -> next attempt RUNNING (ours)    : {med['exit_to_running']:.2f} s")
    exit_ratio = nan
    if "requeueexit_exit_to_running" in med:
        exit_ratio = med["exit_to_running"] / med["requeueexit_exit_to_running"]
        print(f"  job exit -> next attempt RUNNING (Slurm RequeueExit=75): {med['requeueexit_exit_to_running']:.2f} s")
        print(f"  ratio ours / RequeueExit (exit -> RUNNING): {exit_ratio:.2f}")
    print(f"partial failure (rank 0 crashes, the rest blocks {collective_timeout:g} s in a collective, then exits):")
    print(f"  crash line -> our scontrol release returned (job still running): {med['crash_line_to_release']:.2f} s")
    print(f"  crash line -> next attempt RUNNING (ours)   : {med['crash_line_to_running']:.2f} s")
    partial_ratio = nan
    if "requeueexit_partial_crash_line_to_running" in med:
        theirs = med["requeueexit_partial_crash_line_to_running"]
        partial_ratio = med["crash_line_to_running"] / theirs
        print(
            f"  crash line -> next attempt RUNNING (Slurm RequeueExit=75): {theirs:.2f} s "
            f"(of which job exit -> RUNNING {med['requeueexit_partial_exit_to_running']:.2f} s)"
        )
        print(f"  ratio ours / RequeueExit (crash line -> RUNNING): {partial_ratio:.2f}")
    figure("recovery_exit_to_running_vs_requeueexit", exit_ratio, "x", "<=", 1.05)
    figure("recovery_crash_line_to_release", med["crash_line_to_release"], "s", "<=", 1)
    figure("recovery_partial_failure_vs_requeueexit", partial_ratio, "x", "<=", 0.2)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="1 run and a 45 s collective timeout (5 runs, 60 s)")
    parser.add_argument("--runs", type=int, help="number of runs")
    parser.add_argument("--collective-timeout", type=float, help="seconds the surviving ranks block (60; smoke 45)")
    parser.add_argument(
        "--shared-lab", action="store_true", help="run on the default lab instead of starting one of its own"
    )
    parser.add_argument(
        "--configure-lab",
        action="store_true",
        help="with --shared-lab: bring that lab up with RequeueExit=75 (restarts its daemons if the config changes)",
    )
    args = parser.parse_args(argv)
    runs = args.runs or (1 if args.smoke else 5)
    timeout = args.collective_timeout or (45.0 if args.smoke else 60.0)
    return asyncio.run(bench(runs, args.shared_lab, args.configure_lab, timeout))


if __name__ == "__main__":
    sys.exit(main())
