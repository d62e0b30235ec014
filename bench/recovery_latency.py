"""Recovery latency on a real Slurm lab with Slurm's default timings: first crash line -> next attempt RUNNING,
ours beside the same job restarted by Slurm's own `RequeueExit=75`, in the same run.

    .venv/bin/python bench/recovery_latency.py                    # default timings, 3 runs + 1 partial failure
    .venv/bin/python bench/recovery_latency.py --slurm 26.05      # the same on a 26.05 lab (22.05, 24.11 too)
    .venv/bin/python bench/recovery_latency.py --smoke            # fast lab timings, 1 run, 45 s collective timeout
    .venv/bin/python bench/recovery_latency.py --shared-lab       # on the default lab ($RECOVERY_LAB_DIR)

By default it starts a 5-node lab of its own (`recovery lab up --timings default`: cred_expire 120 s, on 25.11+
requeue_delay 120 s, sched_interval=60, bf_interval=30, RequeueExit=75; in `<lab dir>-latency[-<release>]`, ports
shifted by $RECOVERY_BENCH_LAB_PORT_OFFSET, default 7000) and stops it at the end. `--smoke` runs on the lab's fast
timings (cred_expire 5 s, schedulers every 1-2 s) and suffixes its figure names with `_fast`: those figures say
that the paths work, not what a site sees. Needs root and the lab packages (`bash .ci/bootstrap`). Prints numbers;
asserts nothing about time.

The worker (observer + advisor + controller + watchdog) runs in this process on a temporary SQLite database, acting
(ceiling on) for a benchmark-only environment name. Every job writes `date +%s.%N` to a file just before its crash
line and at the start of its next attempt, so all times are on one clock. Each run submits at the same time:

* `RequeueExit`: a non-enrolled job that prints the crash line and exits 75; Slurm requeues it and, after its
  requeue delay (cred_expire, or requeue_delay on 25.11+), the scheduler starts it again. The baseline.
* the requeue path: an enrolled copy (`auto_resume_mode: requeue`) that exits 1; we requeue-hold it, set
  exclusions, release it; Slurm's requeue delay counts from our requeue, so we can only add to the baseline.
* the `singleton_dependency` twin: an enrolled copy submitted with `--dependency=singleton` beside a held twin
  (same name, same comment, `--hold`): we release the twin, a separate job that Slurm never delayed.

The partial failure (once per invocation, beside the runs): rank 0 prints the crash line and dies while the other
ranks block in a collective until the collective timeout (600 s, NCCL's default; `--collective-timeout`) and exit
75. RequeueExit restarts it only after that; ours acts on the crash line while the job still runs (requeue path:
requeue-hold, which then waits Slurm's requeue delay; twin path: cancel, release the twin). Ends with `figure` lines
(bench/figures.py) and, before them, where the time goes: detection (crash line -> the anomaly recorded), decision
(-> the Advice), each Slurm command we ran, Slurm's delay (-> EligibleTime) and scheduling (-> RUNNING).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import io
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import func, select  # noqa: E402

from app.advice.models import Advice, SchedulerAction  # noqa: E402
from app.evidence.models import Anomaly  # noqa: E402
from app.infra.config import Settings  # noqa: E402
from app.infra.context import AppContext  # noqa: E402
from app.infra.migrate import upgrade  # noqa: E402
from app.lab.cli import SLURM_VERSIONS, TIMINGS, default_lab_dir  # noqa: E402
from app.lab.cli import run as lab_run  # noqa: E402
from app.slurm.cli_scheduler import CliScheduler  # noqa: E402
from bench.figures import figure  # noqa: E402
from worker.registry import build_services  # noqa: E402
from worker.runner import WorkerRunner  # noqa: E402

REQUEUE_EXIT = 75
NODES = 5  # room for every job of a run and the partial failure at once: none waits for a CPU
CRASH_LINE = "[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered"
# First attempt: the crash line, then the exit (75 for RequeueExit, 1 for ours). A retry (a requeued attempt or the
# released twin) writes its start time and ends.
SCRIPT = """#!/bin/bash
#SBATCH --job-name={name}
#SBATCH --requeue
#SBATCH --comment='{comment}'
#SBATCH --output=out-%j.log
#SBATCH --open-mode=append
if [ -z "$SLURM_RESTART_COUNT" ] && [ "{role}" = first ]; then
  echo "[$(date -u '+%Y-%m-%d %H:%M:%S')] training ..."
  sleep 1
  date +%s.%N > "crash-$SLURM_JOB_ID"
  echo "[$(date -u '+%Y-%m-%d %H:%M:%S')] {crash}"
  exit {code}
fi
date +%s.%N > "start-$SLURM_JOB_ID"
"""
# A partial failure: rank 0 prints a crash line and dies while the other ranks block in a collective until the
# "collective timeout" (the NCCL timeout of real jobs, 10-30 minutes) and only then does the job exit.
PARTIAL_SCRIPT = """#!/bin/bash
#SBATCH --job-name={name}
#SBATCH --requeue
#SBATCH --comment='{comment}'
#SBATCH --output=out-%j.log
#SBATCH --open-mode=append
if [ -z "$SLURM_RESTART_COUNT" ] && [ "{role}" = first ]; then
  echo "[$(date -u '+%Y-%m-%d %H:%M:%S')] training ..."
  (
    sleep 1
    date +%s.%N > "crash-$SLURM_JOB_ID"
    echo "[$(date -u '+%Y-%m-%d %H:%M:%S')] {crash}"
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


@dataclass
class Path_:
    """One way from a crash line to the next attempt RUNNING, with where its time went (seconds from the crash)."""

    total: float
    parts: list[tuple[str, float]] = field(default_factory=list)


def own_lab(slurm: str) -> tuple[str, int]:
    """The directory and port offset of the lab this bench starts for itself (one per release)."""
    suffix = "" if slurm == "host" else f"-{slurm}"
    return default_lab_dir() + "-latency" + suffix, int(os.environ.get("RECOVERY_BENCH_LAB_PORT_OFFSET", "7000"))


def lab_up(extra_conf: str | None, lab_dir: str, port_offset: int | None, slurm: str | None, timings: str) -> str:
    """Bring a lab up (optionally with extra slurm.conf lines); puts its SLURM_CONF and bin/ into the environment."""
    out = io.StringIO()
    if extra_conf is not None:
        os.environ["RECOVERY_LAB_EXTRA_CONF"] = extra_conf
    print(f"starting the lab in {lab_dir} (Slurm {slurm or 'host'}, {timings} timings) ...", flush=True)
    code = lab_run("up", nodes=NODES, lab_dir=lab_dir, port_offset=port_offset, slurm=slurm, timings=timings, out=out)
    if code != 0:
        raise SystemExit("`recovery lab up` failed (root and the lab packages are needed: bash .ci/bootstrap)")
    exports = dict(re.findall(r"^export (\w+)=(\S+)$", out.getvalue(), re.M))
    if "SLURM_CONF" not in exports:
        raise SystemExit(f"lab printed no SLURM_CONF: {out.getvalue()!r}")
    os.environ["SLURM_CONF"] = exports["SLURM_CONF"]
    if "RECOVERY_SLURM_BIN_DIR" in exports:
        os.environ["RECOVERY_SLURM_BIN_DIR"] = exports["RECOVERY_SLURM_BIN_DIR"]
        os.environ["PATH"] = exports["RECOVERY_SLURM_BIN_DIR"] + os.pathsep + os.environ.get("PATH", "")
    return exports["SLURM_CONF"]


def show_config() -> str:
    return subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=30).stdout


def requeue_exit_configured(shown: str) -> bool:
    match = re.search(r"^RequeueExit\s*=\s*(\S+)", shown, re.M)
    return match is not None and str(REQUEUE_EXIT) in match.group(1).split(",")


def timings_of(shown: str) -> str:
    """What decides the restart delay and the scheduling in the running slurmctld, in one line."""
    keys = ("SLURM_VERSION", "AuthInfo", "SchedulerParameters", "SlurmctldParameters")
    found = {k: m.group(1).strip() for k in keys if (m := re.search(rf"^{k}\s*=\s*(.*)$", shown, re.M))}
    return ", ".join(f"{k}={v}" for k, v in found.items())


def submit(directory: Path, template: str, *, name: str, comment: str, role: str = "first", code: int = 1,
           timeout: float = 0, args: tuple[str, ...] = ()) -> int:  # fmt: skip
    script = directory / f"{name}-{role}-{uuid.uuid4().hex[:6]}.sh"
    script.write_text(
        template.format(name=name, comment=comment, code=code, timeout=timeout, role=role, crash=CRASH_LINE)
    )
    result = subprocess.run(
        ["sbatch", "--parsable", f"--chdir={directory}", *args, str(script)],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return int(result.stdout.strip().split(";", 1)[0])


def policy(environment: str, mode: str) -> str:
    return json.dumps(
        {
            "APS": {
                "workflow_id": "bench",
                "environment": environment,
                "mode": "act",
                "auto_resume_mode": mode,
                "max_requeue_times": 1,
            }
        },
        separators=(",", ":"),
    )


async def wait_file(path: Path, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return float(path.read_text().strip())
        await asyncio.sleep(0.05)
    raise TimeoutError(f"{path} was not written within {timeout:.0f} s")


def eligible_time(job_id: int) -> float:
    """Slurm's EligibleTime of the job (whole seconds; nan when it shows none)."""
    shown = subprocess.run(
        ["scontrol", "show", "job", "-o", str(job_id)], capture_output=True, text=True, timeout=30
    ).stdout
    match = re.search(r"\bEligibleTime=(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\b", shown)
    if not match:
        return math.nan
    return time.mktime(dt.datetime.fromisoformat(match.group(1)).timetuple())


async def commands_done(ctx: AppContext, job_id: int, last_step: str, timeout: float) -> None:
    """Wait until our `last_step` command for the job's Advice succeeded."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        async with ctx.sessions() as session:
            done = await session.scalar(
                select(SchedulerAction.id)
                .join(Advice, Advice.id == SchedulerAction.advice_id)
                .where(
                    Advice.slurm_job_id == job_id,
                    SchedulerAction.step == last_step,
                    SchedulerAction.status == "SUCCEEDED",
                )
            )
        if done is not None:
            return
        await asyncio.sleep(0.1)
    raise TimeoutError(f"no {last_step} for job {job_id} within {timeout:.0f} s")


async def our_path(ctx: AppContext, job_id: int, crash: float, retry_job: int, started: float) -> Path_:
    """Where our recovery's time went, from the crash line of `job_id` to its retry (`retry_job`) RUNNING."""
    async with ctx.sessions() as session:
        advice = await session.scalar(select(Advice).where(Advice.slurm_job_id == job_id).order_by(Advice.id))
        assert advice is not None
        detected = await session.scalar(
            select(func.min(Anomaly.detected_at)).where(Anomaly.attempt_id == advice.attempt_id)
        )
        actions = (
            await session.scalars(
                select(SchedulerAction)
                .where(SchedulerAction.advice_id == advice.id, SchedulerAction.status == "SUCCEEDED")
                .order_by(SchedulerAction.id)
            )
        ).all()
    parts: list[tuple[str, float]] = []
    at = crash
    if detected is not None:
        parts.append(("detection (crash line -> anomaly recorded)", detected.timestamp() - at))
        at = detected.timestamp()
    parts.append(("decision (-> Advice)", advice.created_at.timestamp() - at))
    at = advice.created_at.timestamp()
    for action in actions:
        finished = (action.finished_at or action.started_at).timestamp()
        parts.append((f"  wait before {action.step}", action.started_at.timestamp() - at))
        parts.append((f"  {action.step} ({action.command})", finished - action.started_at.timestamp()))
        at = finished
    eligible = eligible_time(retry_job)
    if not math.isnan(eligible) and eligible > at:
        parts.append(("Slurm's delay (-> EligibleTime)", eligible - at))
        at = eligible
    parts.append(("scheduling (-> RUNNING)", started - at))
    return Path_(started - crash, parts)


def slurm_path(job_id: int, crash: float, exited: float, started: float) -> Path_:
    """Where RequeueExit's time went: crash line -> job exit -> EligibleTime -> RUNNING."""
    parts = []
    at = crash
    if exited > crash + 0.5:
        parts.append(("the job runs on until it exits (collective timeout)", exited - crash))
        at = exited
    eligible = eligible_time(job_id)
    if not math.isnan(eligible) and eligible > at:
        parts.append(("Slurm's delay (requeue -> EligibleTime)", eligible - at))
        at = eligible
    parts.append(("scheduling (-> RUNNING)", started - at))
    return Path_(started - crash, parts)


async def requeue_run(ctx: AppContext, directory: Path, environment: str, baseline: bool) -> dict[str, Path_]:
    """One run: RequeueExit, the requeue path and the twin path, submitted at the same time."""
    tag = uuid.uuid4().hex[:6]
    ours = submit(directory, SCRIPT, name=f"bench-requeue-{tag}", comment=policy(environment, "requeue"))
    twin_name = f"bench-twin-{tag}"
    twin_policy = policy(environment, "singleton_dependency")
    first = submit(directory, SCRIPT, name=twin_name, comment=twin_policy, args=("--dependency=singleton",))
    twin = submit(
        directory, SCRIPT, name=twin_name, comment=twin_policy, role="twin", args=("--dependency=singleton", "--hold")
    )
    theirs = (
        submit(directory, SCRIPT, name=f"bench-requeueexit-{tag}", comment="benchmark baseline", code=REQUEUE_EXIT)
        if baseline
        else None
    )
    limit = 600.0
    mine, twins = await requeue_and_twin_paths(ctx, directory, ours, first, twin, limit)
    row = {"requeue": mine, "twin": twins}
    if theirs is not None:
        their_crash = await wait_file(directory / f"crash-{theirs}", limit)
        their_start = await wait_file(directory / f"start-{theirs}", limit)
        row["requeueexit"] = slurm_path(theirs, their_crash, their_crash, their_start)
        subprocess.run(["scancel", str(theirs)], capture_output=True, timeout=30, check=False)
    return row


async def requeue_and_twin_paths(
    ctx: AppContext, directory: Path, ours: int, first: int, twin: int, limit: float
) -> tuple[Path_, Path_]:
    """Our requeue path (job `ours`) and the twin path (`first` crashes, `twin` takes over), once both released."""
    crash = await wait_file(directory / f"crash-{ours}", limit)
    twin_crash = await wait_file(directory / f"crash-{first}", limit)
    started = await wait_file(directory / f"start-{ours}", limit)
    twin_started = await wait_file(directory / f"start-{twin}", limit)
    await commands_done(ctx, ours, "release", 30)
    await commands_done(ctx, first, "release", 30)
    return await our_path(ctx, ours, crash, ours, started), await our_path(ctx, first, twin_crash, twin, twin_started)


async def partial_run(
    ctx: AppContext, directory: Path, environment: str, baseline: bool, collective_timeout: float
) -> dict[str, Path_]:
    """The partial failure: RequeueExit, the requeue path and the twin path, submitted at the same time."""
    tag = uuid.uuid4().hex[:6]
    ours = submit(
        directory,
        PARTIAL_SCRIPT,
        name=f"bench-partial-{tag}",
        comment=policy(environment, "requeue"),
        timeout=collective_timeout,
    )
    twin_name = f"bench-partial-twin-{tag}"
    twin_policy = policy(environment, "singleton_dependency")
    first = submit(
        directory,
        PARTIAL_SCRIPT,
        name=twin_name,
        comment=twin_policy,
        timeout=collective_timeout,
        args=("--dependency=singleton",),
    )
    twin = submit(
        directory,
        PARTIAL_SCRIPT,
        name=twin_name,
        comment=twin_policy,
        role="twin",
        args=("--dependency=singleton", "--hold"),
    )
    theirs = (
        submit(
            directory,
            PARTIAL_SCRIPT,
            name=f"bench-partial-requeueexit-{tag}",
            comment="benchmark baseline",
            code=REQUEUE_EXIT,
            timeout=collective_timeout,
        )
        if baseline
        else None
    )
    limit = 600.0
    mine, twins = await requeue_and_twin_paths(ctx, directory, ours, first, twin, limit)
    row = {"partial_requeue": mine, "partial_twin": twins}
    if theirs is not None:
        their_crash = await wait_file(directory / f"crash-{theirs}", limit)
        their_exit = await wait_file(directory / f"exit-{theirs}", collective_timeout + limit)
        their_start = await wait_file(directory / f"start-{theirs}", limit)
        row["partial_requeueexit"] = slurm_path(theirs, their_crash, their_exit, their_start)
        subprocess.run(["scancel", str(theirs)], capture_output=True, timeout=30, check=False)
    return row


async def bench(args: argparse.Namespace, runs: int, timings: str, collective_timeout: float) -> int:
    if args.shared_lab:
        lab_dir = default_lab_dir()
        lab_up("RequeueExit=75" if args.configure_lab else None, lab_dir, None, args.slurm, timings)
        return await measure(runs, lab_dir, collective_timeout, args.smoke)
    lab_dir, port_offset = own_lab(args.slurm or "host")
    try:
        lab_up(f"RequeueExit={REQUEUE_EXIT}", lab_dir, port_offset, args.slurm, timings)
        return await measure(runs, lab_dir, collective_timeout, args.smoke)
    finally:
        lab_run("down", lab_dir=lab_dir, port_offset=port_offset, out=io.StringIO())


def show_path(label: str, path: Path_) -> None:
    print(f"  {label}: {path.total:.2f} s")
    for name, seconds in path.parts:
        print(f"      {seconds:8.2f} s  {name}")


async def measure(runs: int, lab_dir: str, collective_timeout: float, smoke: bool) -> int:
    """Time `runs` recoveries and one partial failure, ours beside RequeueExit; prints the `figure` lines."""
    shown = show_config()
    baseline = requeue_exit_configured(shown)
    print(f"lab: {timings_of(shown)}")
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
            # every run restarts the same workflow, several jobs fail at once: no budget or storm pause may hold one
            budget_workflow_restarts=0,
            budget_cluster_restarts=0,
            storm_jobs=0,
            poll_interval=0.2,
            lease_seconds=5.0,
        )
        ctx = AppContext.open(settings)
        await upgrade(ctx.engine)
        runner = WorkerRunner(ctx, build_services(ctx, scheduler=CliScheduler(settings)))
        task = asyncio.create_task(runner.run())
        rows: list[dict[str, Path_]] = []
        try:
            partial = asyncio.create_task(partial_run(ctx, directory, environment, baseline, collective_timeout))
            for number in range(1, runs + 1):
                row = await requeue_run(ctx, directory, environment, baseline)
                rows.append(row)
                print(f"run {number}: " + "  ".join(f"{k}={v.total:.2f}s" for k, v in row.items()), flush=True)
            partial_row = await partial
            print("partial failure: " + "  ".join(f"{k}={v.total:.2f}s" for k, v in partial_row.items()), flush=True)
        finally:
            runner.stop()
            await task
            await ctx.close()
    suffix = "_fast" if smoke else ""
    nan = math.nan
    median = {key: statistics.median(r[key].total for r in rows) for key in rows[0]}
    middle = {key: sorted(rows, key=lambda r: r[key].total)[(len(rows) - 1) // 2][key] for key in rows[0]}
    print()
    print(f"first crash line -> next attempt RUNNING, median of {len(rows)} runs (the median run's breakdown):")
    for key in ("requeueexit", "requeue", "twin"):
        if key in middle:
            show_path({"requeueexit": "Slurm RequeueExit=75", "requeue": "ours, requeue path",
                       "twin": "ours, singleton_dependency twin"}[key], middle[key])  # fmt: skip
    base = median.get("requeueexit", nan)
    print(f"partial failure ({collective_timeout:g} s collective timeout), one sample:")
    for key, label in (
        ("partial_requeueexit", "Slurm RequeueExit=75"),
        ("partial_requeue", "ours, requeue path"),
        ("partial_twin", "ours, singleton_dependency twin"),
    ):
        if key in partial_row:
            show_path(label, partial_row[key])
    partial_base = partial_row["partial_requeueexit"].total if "partial_requeueexit" in partial_row else nan
    last_command = statistics.median(
        sum(s for name, s in r["requeue"].parts if not name.startswith(("Slurm", "scheduling"))) for r in rows
    )
    print(
        "the requeue path's partial failure cannot reach 0.1x while Slurm holds a requeued job for its requeue "
        "delay (cred_expire / requeue_delay): the twin path is a new job, which Slurm does not delay"
    )
    figure(f"recovery_requeue_vs_requeueexit{suffix}", median["requeue"] / base, "x", "<=", 1.05)
    figure(f"recovery_twin_vs_requeueexit{suffix}", median["twin"] / base, "x", "<=", 0.3)
    figure(
        f"recovery_partial_twin_vs_requeueexit{suffix}",
        partial_row["partial_twin"].total / partial_base,
        "x",
        "<=",
        0.1,
    )
    figure(
        f"recovery_partial_requeue_vs_requeueexit{suffix}",
        partial_row["partial_requeue"].total / partial_base,
        "x",
        "<=",
        0.1,
    )
    figure(f"recovery_crash_line_to_last_command{suffix}", last_command, "s", "<=", 10)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="fast lab timings, 1 run, 45 s collective timeout")
    parser.add_argument("--runs", type=int, help="runs of the requeue and twin paths (3; smoke 1)")
    parser.add_argument("--collective-timeout", type=float, help="seconds the surviving ranks block (600; smoke 45)")
    parser.add_argument("--slurm", choices=SLURM_VERSIONS, default=None, help="the lab's Slurm release (host)")
    parser.add_argument("--timings", choices=TIMINGS, help="the lab's timings (default; smoke: fast)")
    parser.add_argument(
        "--shared-lab", action="store_true", help="run on the default lab instead of starting one of its own"
    )
    parser.add_argument(
        "--configure-lab",
        action="store_true",
        help="with --shared-lab: bring that lab up with RequeueExit=75 (restarts its daemons if the config changes)",
    )
    args = parser.parse_args(argv)
    runs = args.runs or (1 if args.smoke else 3)
    timeout = args.collective_timeout or (45.0 if args.smoke else 600.0)
    timings = args.timings or ("fast" if args.smoke else "default")
    return asyncio.run(bench(args, runs, timings, timeout))


if __name__ == "__main__":
    sys.exit(main())
