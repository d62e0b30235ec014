"""Collector tick cost with N tracked log files, against plain Python reading the same bytes.

Usage: .venv/bin/python bench/collector_files.py [--files 1000] [--jobs N] [--repeat 5] [--smoke]

Sets up a migrated SQLite database with N enrolled RUNNING jobs, each writing its own log file: the
observer registers them from one `squeue --json` answer of --jobs records (default N; the rest are not
enrolled, as on a large shared cluster) (as the worker does, so the process
holds what a worker with N jobs holds), then primes the collector (the first tick reads every file), then
measures ticks when nothing changed and when 1% of the files got a few new lines (a crash line in
some). Two wake-up paths are measured: inotify (the changed paths are known, as the watchfiles
task would report them; set here directly so the run is deterministic) and the polling fallback
(stat every file). The baseline, measured in the same run, is plain Python: open/seek/read of only
the changed files' new bytes plus `os.stat` of all N files. The resident memory of the process
(observer and collector state of N jobs and N files) is printed at the end. Ends with one `figure`
line per goal (issue 16, item 4; issue 28, item 3: `--files 20000 --jobs 50000`). The idle polling tick
is compared with a plain `os.stat` of the same files measured right before it (paired, median of the
ratios), so load from elsewhere hits both alike. No timing is asserted anywhere.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import functools
import importlib
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlalchemy import event, select  # noqa: E402

from app.infra.config import Settings  # noqa: E402
from app.infra.context import AppContext  # noqa: E402
from app.infra.migrate import upgrade  # noqa: E402
from app.jobs import service as jobs  # noqa: E402
from app.jobs.models import Attempt  # noqa: E402
from worker.collector import Collector  # noqa: E402
from worker.observer import Observer  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
observer_tick = importlib.import_module("observer_tick")  # the same snapshot and scheduler as that bench

ITERATION = (
    " iteration {i:>8}/  500000 | consumed samples: 12800 | elapsed time per iteration (ms): "
    "1234.5 | lm loss: 2.3E+00 |\n"
)
CRASH = "RuntimeError: CUDA error: an illegal memory access was encountered\n"
POLL_INTERVAL = 2.0


class Clock:
    """The collector's clock, moved by the benchmark so that a poll is due only when it wants one."""

    def __init__(self) -> None:
        self.now = dt.datetime.now(dt.UTC)

    def __call__(self) -> dt.datetime:
        return self.now


async def enrol(ctx: AppContext, directory: Path, count: int, jobs: int) -> tuple[list[Path], Observer]:
    """N enrolled RUNNING jobs (of `jobs` in the answer) registered by the observer, each writing its own file."""
    paths = [directory / f"out-{100000 + i}.log" for i in range(count)]
    for path in paths:
        path.write_text("".join(ITERATION.format(i=n) for n in range(20)))
    document = observer_tick.build_snapshot(max(jobs, count), count)
    started = int((dt.datetime.now(dt.UTC) - dt.timedelta(minutes=10)).timestamp())
    for record, path in zip(document["jobs"], paths, strict=False):
        record["standard_output"] = record["standard_error"] = str(path)
        record["start_time"] = started
    observer = Observer(ctx, observer_tick.StaticScheduler(json.dumps(document).encode()))
    observer.state.watching_since = dt.datetime.now(dt.UTC)
    await observer.tick()
    return paths, observer


def resident_mb() -> tuple[float, float]:
    """(resident set size now, its peak) of this process in MB."""
    now = 0.0
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                now = int(line.split()[1]) / 1024
    return now, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def observe_change(ctx: AppContext, round_: int) -> None:
    """What the observer records between two collector ticks: one attempt of one job changed (not measured)."""
    async with ctx.sessions() as session, session.begin():
        attempt = await session.scalar(select(Attempt).order_by(Attempt.id).offset(round_).limit(1))
        assert attempt is not None
        await jobs.update_attempt(session, attempt=attempt, nodes=f"gpu[{round_:03d}-{round_ + 7:03d}]")


def append_lines(paths: list[Path], round_: int) -> int:
    """A few new lines in each path, a crash line in every fourth; returns the bytes written."""
    written = 0
    for n, path in enumerate(paths):
        text = "".join(ITERATION.format(i=1000 * round_ + k) for k in range(5))
        if n % 4 == 0:
            text += f"[rank{round_}] " + CRASH
        with path.open("a") as handle:
            handle.write(text)
        written += len(text)
    return written


def plain_python(all_paths: list[Path], changed: list[Path], offsets: dict[Path, int]) -> int:
    """The floor: stat every file, read only the new bytes of the changed ones."""
    for path in all_paths:
        os.stat(path)
    total = 0
    for path in changed:
        with open(path, "rb") as handle:
            handle.seek(offsets[path])
            data = handle.read()
        offsets[path] += len(data)
        total += len(data)
    return total


class StatementCounter:
    """Counts SQL statements sent on the engine."""

    def __init__(self, ctx: AppContext) -> None:
        self.count = 0
        event.listen(ctx.engine.sync_engine, "before_cursor_execute", self._count)

    def _count(self, *args: object) -> None:
        self.count += 1


async def timed(action: Callable[[], Awaitable[None]], counter: StatementCounter) -> tuple[float, int]:
    before = counter.count
    t0 = time.perf_counter()
    await action()
    return time.perf_counter() - t0, counter.count - before


def open_files_for(files: int) -> None:
    """The worker holds one descriptor per tracked file (to finish a rotated one): raise the limit to fit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = files + 1024
    if soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, max(hard, wanted)))
        except (ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            print(f"open files limited to {hard}: some of the {files} files cannot be held open")


async def main(args: argparse.Namespace) -> None:
    open_files_for(args.files)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        logs = root / "logs"
        logs.mkdir()
        settings = Settings.build(
            data_dir=tmp, environment="bench", cluster="bench", collector_poll_interval=POLL_INTERVAL
        )
        ctx = AppContext.open(settings)
        await upgrade(ctx.engine)
        t0 = time.perf_counter()
        paths, observer = await enrol(ctx, logs, args.files, args.jobs or args.files)
        print(
            f"setup: {args.files} enrolled RUNNING attempts, one log file each, "
            f"{max(args.jobs, args.files)} jobs in the answer "
            f"({time.perf_counter() - t0:.1f} s, not measured)"
        )

        clock = Clock()
        collector = Collector(ctx, clock=clock, use_inotify=False)
        counter = StatementCounter(ctx)
        elapsed, statements = await timed(collector.tick, counter)
        print(f"priming tick (reads every file):       {elapsed * 1000:9.1f} ms, {statements} SQL statements")
        # A tick reads at most a budget of files: more priming ticks until one finds nothing to read (not measured).
        primed = 1
        while collector.last_tick["read"] or collector.last_tick["unfinished"]:
            clock.now += dt.timedelta(seconds=POLL_INTERVAL + 0.01)
            await collector.tick()
            primed += 1
        print(f"primed in {primed} ticks")
        offsets = {path: path.stat().st_size for path in paths}

        def poll_due() -> None:
            clock.now += dt.timedelta(seconds=POLL_INTERVAL + 0.01)

        def poll_not_due() -> None:
            clock.now += dt.timedelta(milliseconds=1)

        async def inotify_tick(changed: list[Path]) -> None:
            collector._dirty.update(str(p) for p in changed)  # what the watchfiles task reports
            await collector.tick()

        step = max(1, args.files // 100)
        rows: dict[str, list[tuple[float, int]]] = {
            key: [] for key in ("idle_inotify", "idle_poll", "changed_inotify", "changed_poll", "poke", "baseline")
        }
        stats: list[float] = []  # the idle polling tick's floor: os.stat of every file
        idle_ratios: list[float] = []  # each idle polling tick over the os.stat pass right before it
        for round_ in range(1, args.repeat + 1):
            poll_not_due()
            rows["idle_inotify"].append(await timed(lambda: inotify_tick([]), counter))
            for _ in range(args.idle_pairs):
                t0 = time.perf_counter()
                for path in paths:
                    os.stat(path)
                stats.append(time.perf_counter() - t0)
                poll_due()
                if args.profile and round_ == 1:
                    import cProfile
                    import pstats

                    with cProfile.Profile() as profile:
                        await collector.tick()
                    pstats.Stats(profile).sort_stats("cumulative").print_stats(25)
                rows["idle_poll"].append(await timed(collector.tick, counter))
                idle_ratios.append(rows["idle_poll"][-1][0] / stats[-1])

            changed = paths[round_ % step :: step][: max(1, args.files // 100)]
            append_lines(changed, 2 * round_)
            poll_not_due()
            rows["changed_inotify"].append(await timed(functools.partial(inotify_tick, changed), counter))
            append_lines(changed, 2 * round_ + 1)
            poll_due()
            rows["changed_poll"].append(await timed(collector.tick, counter))

            for path in changed:  # the baseline reads the same bytes the two changed ticks read
                with path.open("ab"):
                    pass
            offsets_copy = dict(offsets)
            t0 = time.perf_counter()
            plain_python(paths, changed, offsets_copy)
            rows["baseline"].append((time.perf_counter() - t0, 0))
            offsets.update(offsets_copy)

            await observe_change(ctx, round_)
            poll_not_due()
            collector.poke()  # what the observer does after recording a change
            rows["poke"].append(await timed(collector.tick, counter))

        def median(key: str) -> tuple[float, int]:
            return statistics.median(r[0] for r in rows[key]), int(statistics.median(r[1] for r in rows[key]))

        base, _ = median("baseline")
        changed_count = max(1, args.files // 100)
        print(
            f"baseline (plain Python: stat {args.files} files + read the new bytes of "
            f"{changed_count}): {base * 1000:9.2f} ms"
        )
        labels = {
            "idle_inotify": "tick, nothing changed (inotify)",
            "idle_poll": f"tick, nothing changed (poll: stat {args.files})",
            "changed_inotify": f"tick, {changed_count} files changed (inotify)",
            "changed_poll": f"tick, {changed_count} files changed (poll)",
            "poke": "tick after the observer changed 1 attempt",
        }
        for key, label in labels.items():
            seconds, statements = median(key)
            print(f"{label:44s} {seconds * 1000:9.2f} ms  {statements:5d} SQL  ratio/baseline {seconds / base:8.2f}x")
        changed_s, _ = median("changed_inotify")
        print(f"ratio changed tick / baseline:               {changed_s / base:8.2f}x (median of {args.repeat})")
        idle_poll_s, _ = median("idle_poll")
        stat_s = statistics.median(stats)
        print(f"plain stat baseline (os.stat of {args.files} files):    {stat_s * 1000:9.2f} ms")
        idle_ratio = statistics.median(idle_ratios)
        print(
            f"ratio idle tick (poll) / plain stat:         {idle_ratio:8.2f}x (median of {len(idle_ratios)} pairs; "
            f"of the medians {idle_poll_s / stat_s:.2f}x)"
        )
        await observer.tick()  # the worker keeps looking at its N jobs meanwhile
        rss, peak = resident_mb()
        print(
            f"resident memory, observer with {len(observer.state.seen)} jobs + collector with "
            f"{len(collector.tracked)} files: {rss:.0f} MB (peak of the run {peak:.0f} MB)"
        )
        await collector.on_stop()
        await ctx.close()
    from bench.figures import figure

    figure("collector_idle_poll_tick_vs_stat", idle_ratio, "x", "<=", 2)
    figure("worker_resident_memory", rss, "MB", "<=", 1000)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1_000)
    parser.add_argument("--jobs", type=int, default=0, help="jobs in the squeue answer (default: --files)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--idle-pairs", type=int, default=3, help="idle polling ticks (each paired) per round")
    parser.add_argument("--profile", action="store_true", help="print a profile of one idle polling tick")
    parser.add_argument("--smoke", action="store_true", help="small run for CI (1,000 files, fewer rounds)")
    arguments = parser.parse_args()
    if arguments.smoke:
        arguments.files, arguments.repeat, arguments.idle_pairs = 1_000, 2, 5
    asyncio.run(main(arguments))
