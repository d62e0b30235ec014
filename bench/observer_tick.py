"""Observer tick cost on a 10,000-job (or 50,000) `squeue --json` snapshot, against `json.loads` of the same bytes.

Usage: .venv/bin/python bench/observer_tick.py [--jobs 10000] [--enrolled JOBS/10] [--repeat 5]
       [--first-ticks 3] [--database-url postgresql+asyncpg://...] [--smoke]

The snapshot is built from a real Slurm 22.05 record captured on the lab
(tests/fixtures/slurm/squeue-v0.0.38-lab.json), one record per job with its own id, state and
comment. The answers are parsed as the CLI scheduler parses them (app.slurm.incremental.SnapshotParser:
an unchanged job record is not decoded again). The first tick registers the enrolled jobs (one
transaction, multi-row inserts); the measured ticks see an unchanged snapshot (parse + compare, no
database work) and then ones where 1% of the jobs changed state. Baselines measured in the same
run: `json.loads` of the same bytes and the fast parser (`msgspec.json.decode`, the GC paused as
the scheduler does for both). SQL statements are counted per table (before_cursor_execute); the
changed tick is split into parse, executing SQL and the rest, beside a floor: the unchanged tick plus
the fewest Core statements that record the same changes (without the ORM or any audit event) plus the
changed records' parse. Every ratio is paired: the median of per-round ratios, each against a baseline
measured right beside it. Ends with one `figure` line per goal (issue 16, items 2 and 3; issue 28, item 3).
Without --database-url it runs on SQLite and then on a scratch database of $RECOVERY_TEST_PG's PostgreSQL
server (default postgres@127.0.0.1:5432), created and dropped by the run; PostgreSQL's figures carry a
`_postgresql` suffix (nan when the server is unreachable).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import functools
import gc
import json
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, cast

import msgspec

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlalchemy import Table, bindparam, event, select, update  # noqa: E402

from app.feed.models import ChangeFeedEntry  # noqa: E402
from app.infra.config import Settings  # noqa: E402
from app.infra.context import AppContext  # noqa: E402
from app.infra.db import utcnow  # noqa: E402
from app.infra.migrate import upgrade  # noqa: E402
from app.infra.sql import insert_rows, one_of  # noqa: E402
from app.jobs.models import Attempt, Job  # noqa: E402
from app.slurm.incremental import SnapshotParser  # noqa: E402
from app.slurm.records import Snapshot  # noqa: E402
from bench.figures import figure  # noqa: E402
from bench.scratch_db import PG_SERVER, reachable, scratch_postgres  # noqa: E402
from worker.observer import Observer  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "slurm" / "squeue-v0.0.38-lab.json"


def build_snapshot(jobs: int, enrolled: int) -> dict:
    """A squeue --json document with `jobs` records, `enrolled` of them carrying an APS policy."""
    document = json.loads(FIXTURE.read_text())
    template = document["jobs"][0]
    records = []
    for i in range(jobs):
        record = copy.deepcopy(template)
        record["job_id"] = 100000 + i
        record["name"] = f"train-{i}"
        record["job_state"] = "RUNNING"
        record["restart_cnt"] = 0
        if i < enrolled:
            record["comment"] = json.dumps(
                {
                    "APS": {
                        "workflow_id": f"wf-{i % 200}",
                        "environment": "bench",
                        "mode": "observe",
                        "max_requeue_times": 2,
                    }
                }
            )
        else:
            record["comment"] = "" if i % 3 else "nightly evaluation"
        records.append(record)
    document["jobs"] = records
    return document


class StaticScheduler:
    """Serves pre-recorded bytes as `squeue --json` answers, parsed as CliScheduler.list_jobs parses them."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.snapshots = SnapshotParser()
        self.parse_seconds = 0.0  # of the last answer

    async def list_jobs(self) -> Snapshot:
        started = time.perf_counter()
        snapshot = self.snapshots.parse(self.raw)
        self.parse_seconds = time.perf_counter() - started
        return snapshot


class StatementCounter:
    """SQL statements sent on the engine, by the table they write (or read), and the time spent executing them."""

    TABLE = re.compile(r"^\s*(?:INSERT INTO|UPDATE|DELETE FROM|SELECT\b.*?\bFROM)\s+\"?(\w+)", re.S | re.I)

    def __init__(self, ctx: AppContext) -> None:
        self.by_table: Counter[str] = Counter()
        self.seconds = 0.0  # executing statements (commit aside), since the last take()
        self._started = 0.0
        event.listen(ctx.engine.sync_engine, "before_cursor_execute", self._count)
        event.listen(ctx.engine.sync_engine, "after_cursor_execute", self._executed)

    def _count(self, conn: object, cursor: object, statement: str, *args: object) -> None:
        match = self.TABLE.match(statement)
        verb = statement.split(None, 1)[0].upper()
        self.by_table[f"{verb} {match.group(1) if match else '-'}"] += 1
        self._started = time.perf_counter()

    def _executed(self, *args: object) -> None:
        self.seconds += time.perf_counter() - self._started

    def take(self) -> Counter[str]:
        counts, self.by_table, self.seconds = self.by_table, Counter(), 0.0
        return counts


async def core_floor(ctx: AppContext, slurm_job_ids: list[int]) -> None:
    """The fewest statements that record one change of these jobs' attempts, in Core (no ORM): a floor for the tick."""
    async with ctx.sessions() as session, session.begin():
        jobs = select(Job.id).where(
            Job.cluster == ctx.settings.cluster, one_of(session, Job.slurm_job_id, slurm_job_ids)
        )
        job_ids = list((await session.scalars(jobs)).all())
        attempts = (
            await session.execute(select(Attempt.id, Attempt.state).where(one_of(session, Attempt.job_id, job_ids)))
        ).all()
        now = utcnow()
        table = cast(Table, Attempt.__table__)
        await session.execute(
            update(table)
            .where(table.c.id == bindparam("aid"))
            .values(end_time=bindparam("at"), updated_at=bindparam("at")),
            [{"aid": attempt_id, "at": now} for attempt_id, _ in attempts],
        )
        entry: dict[str, Any] = {
            "topic": "attempt",
            "cluster": ctx.settings.cluster,
            "workflow_id": None,
            "slurm_job_id": None,
        }
        rows = [
            {**entry, "entity_id": attempt_id, "attempt_index": 0, "payload": {}, "created_at": now}
            for attempt_id, _ in attempts
        ]
        await insert_rows(session, ChangeFeedEntry, rows)


def median_seconds(action, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        action()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def without_gc(decode):
    def run() -> None:
        gc.disable()
        try:
            decode()
        finally:
            gc.enable()

    return run


def changed_copy(document: dict, round_: int, count: int) -> bytes:
    """The snapshot with `count` enrolled jobs moved on (round 1: COMPLETED, then their end time moves)."""
    changed = copy.deepcopy(document)
    for record in changed["jobs"][:count]:
        record["job_state"] = "COMPLETED"
        record["end_time"] = 1_700_000_000 + round_
    return json.dumps(changed).encode()


async def measure(args: argparse.Namespace, database_url: str) -> list[tuple[str, float, str, str, float]]:
    """Every tick figure on one database (SQLite in a temporary directory when `database_url` is empty)."""
    document = build_snapshot(args.jobs, args.enrolled)
    raw = json.dumps(document).encode()
    changed_count = max(1, args.jobs // 100)
    changed_raws = [changed_copy(document, n, changed_count) for n in range(args.repeat)]
    print(f"snapshot: {args.jobs} jobs ({args.enrolled} enrolled), {len(raw) / 1e6:.1f} MB of JSON")

    with tempfile.TemporaryDirectory() as tmp:
        values = {"database_url": database_url} if database_url else {}
        loads_s = median_seconds(without_gc(lambda: json.loads(raw)), args.repeat)
        fast_s = median_seconds(without_gc(lambda: msgspec.json.decode(raw)), args.repeat)
        print(f"json.loads of the snapshot:              {loads_s * 1000:8.1f} ms (median of {args.repeat})")
        print(f"msgspec.json.decode of the snapshot:     {fast_s * 1000:8.1f} ms (the fast parser)")

        # The first tick, once per cluster of one database (each registers the same jobs anew); each is
        # compared with a json.loads measured right before it, so load from elsewhere hits both alike.
        # Rounds in pairs: RECOVERY_FAST_PATHS off (each job registered on its own), then on (register_jobs: a few
        # multi-row statements), so the fast path is measured against its normal path in the same run.
        first_ratios: list[float] = []
        first_times: list[float] = []
        off_ratios: list[float] = []
        off_times: list[float] = []
        opened: list[AppContext] = []
        for round_ in range(args.first_ticks * 2):
            fast = round_ % 2 == 1
            settings = Settings.build(
                data_dir=tmp, environment="bench", cluster=f"bench-{round_}", fast_paths=fast, **values
            )
            ctx = AppContext.open(settings)
            if not opened:
                await upgrade(ctx.engine)
            else:
                await opened.pop().close()
            opened.append(ctx)
            scheduler = StaticScheduler(raw)
            observer = Observer(ctx, scheduler)  # type: ignore[arg-type]
            counter = StatementCounter(ctx)
            before = median_seconds(without_gc(lambda: json.loads(raw)), 3)
            started = time.perf_counter()
            await observer.tick()
            times, ratios = (first_times, first_ratios) if fast else (off_times, off_ratios)
            times.append(time.perf_counter() - started)
            ratios.append(times[-1] / before)
            statements = counter.take()
            if not fast:
                off_statements = statements
        backend = ctx.engine.dialect.name
        print(f"database: {backend}")
        first_s, first_ratio = statistics.median(first_times), statistics.median(first_ratios)
        print(
            f"first tick (registers {args.enrolled} jobs and attempts): {first_s * 1000:8.1f} ms "
            f"(median of {args.first_ticks}), {first_ratio:.2f}x json.loads (paired), {first_s / fast_s:.2f}x msgspec"
        )
        print(
            f"  {sum(statements.values())} SQL statements: "
            + ", ".join(f"{k} {v}" for k, v in sorted(statements.items()))
        )
        off_s, off_ratio = statistics.median(off_times), statistics.median(off_ratios)
        print(
            f"first tick with RECOVERY_FAST_PATHS=off (one job at a time): {off_s * 1000:8.1f} ms, "
            f"{off_ratio:.2f}x json.loads (paired), {sum(off_statements.values())} SQL statements"
        )

        # Rounds of (json.loads, unchanged tick, 1%-changed tick, the Core floor of that change): each figure is the
        # median of per-round ratios, so a burst of load from elsewhere hits a figure and its baseline alike.
        counter.take()
        loads_paired, unchanged_ratios, floor_ratios = [], [], []
        ticks, unchanged_parses, changed_ticks, parts, floors = [], [], [], [], []
        changed_ids = [100000 + i for i in range(changed_count)]
        unchanged_sql = changed_sql = 0
        statements = Counter[str]()
        for changed_raw in changed_raws:  # each round moves the same 1% on (state, then end time)
            current = scheduler.raw
            loads_paired.append(median_seconds(without_gc(functools.partial(json.loads, current)), 1))
            # each tick gets its own copy of the bytes, as squeue's output is: comparing a record with the very
            # buffer the previous tick held reads half the memory (about 7% of this tick) a real tick reads
            scheduler.raw = bytes(bytearray(current))
            t0 = time.perf_counter()
            await observer.tick()
            ticks.append(time.perf_counter() - t0)
            unchanged_parses.append(scheduler.parse_seconds)
            unchanged_sql += sum(counter.take().values())
            unchanged_ratios.append(ticks[-1] / loads_paired[-1])

            scheduler.raw = changed_raw
            sql_before = counter.seconds
            t0 = time.perf_counter()
            await observer.tick()
            changed_ticks.append(time.perf_counter() - t0)
            parts.append((changed_ticks[-1], scheduler.parse_seconds, counter.seconds - sql_before))
            taken = counter.take()
            changed_sql += sum(taken.values())
            statements.update(taken)

            t0 = time.perf_counter()
            await core_floor(ctx, changed_ids)
            floors.append(time.perf_counter() - t0)
            counter.take()
            floor_tick = ticks[-1] + floors[-1] + parts[-1][1] - unchanged_parses[-1]
            floor_ratios.append(changed_ticks[-1] / floor_tick)
        rounds = len(changed_raws)
        unchanged_s, unchanged_parse_s = statistics.median(ticks), statistics.median(unchanged_parses)
        unchanged_ratio = statistics.median(unchanged_ratios)
        print(
            f"observer tick, unchanged snapshot:       {unchanged_s * 1000:8.1f} ms (median of {rounds}), "
            f"{unchanged_sql / rounds:.0f} SQL statements"
        )
        print(f"ratio tick / json.loads:                 {unchanged_ratio:8.2f}x (median of {rounds} paired ratios)")
        print(f"ratio tick / msgspec.json.decode:        {unchanged_s / fast_s:8.2f}x")

        changed_s = statistics.median(changed_ticks)
        _, parse_s, sql_s = sorted(parts)[len(parts) // 2]
        print(
            f"observer tick, 1% of jobs changed:       {changed_s * 1000:8.1f} ms (median of {rounds}), "
            f"{changed_sql / rounds:.0f} SQL statements per tick"
        )
        print("  " + ", ".join(f"{k} {v / rounds:.0f}" for k, v in sorted(statements.items())))
        print(
            f"  of the median tick: parse {parse_s * 1000:.1f} ms (unchanged tick: {unchanged_parse_s * 1000:.1f}), "
            f"executing SQL {sql_s * 1000:.1f} ms, the rest (diff, ORM, services, commit) "
            f"{(changed_s - parse_s - sql_s) * 1000:.1f} ms"
        )
        print(f"ratio changed tick / unchanged tick:     {changed_s / unchanged_s:8.2f}x")
        floor_s = statistics.median(floors)
        floor_ratio = statistics.median(floor_ratios)
        print(
            f"  floor: the fewest Core statements recording {changed_count} changed attempts {floor_s * 1000:.1f} ms; "
            f"with the unchanged tick and the changed records' parse "
            f"{(unchanged_s + floor_s + parse_s - unchanged_parse_s) * 1000:.1f} ms"
        )
        print(f"ratio changed tick / floor:              {floor_ratio:8.2f}x (median of {rounds} paired ratios)")
        await ctx.close()
    saved = 100 * (1 - first_ratio / off_ratio)
    return goals(backend, first_ratio, unchanged_ratio, floor_ratio, saved)


def goals(
    backend: str, first: float, unchanged: float, changed: float, saved: float
) -> list[tuple[str, float, str, str, float]]:
    """The goals of one database's run, as `figure` arguments (a suffix names PostgreSQL's); `saved` is the share
    of the first tick's time (paired ratio) register_jobs saves over registering one job at a time."""
    suffix = "" if backend == "sqlite" else f"_{backend}"
    return [
        (f"observer_first_tick_vs_json_loads{suffix}", first, "x", "<=", 4),
        (f"observer_unchanged_tick_vs_json_loads{suffix}", unchanged, "x", "<=", 0.2),
        (f"observer_changed_tick_vs_floor{suffix}", changed, "x", "<=", 1.3),
        (f"observer_first_tick_fast_paths_saved{suffix}", saved, "%", ">=", 20),
    ]


async def main(args: argparse.Namespace) -> None:
    """The given database, else SQLite and then a scratch PostgreSQL database; the figure lines come last."""
    if args.database_url:
        results = await measure(args, args.database_url)
    else:
        results = await measure(args, "")
        print()
        why = await reachable()
        if why is None:
            async with scratch_postgres() as url:
                results += await measure(args, url)
        else:
            print(f"PostgreSQL at {PG_SERVER} is not reachable ({why}): its figures are not measured")
            results += goals("postgresql", *[float("nan")] * 4)
    for result in results:
        figure(*result)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--enrolled", type=int, default=0, help="jobs with an APS policy (default: a tenth of --jobs)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--first-ticks", type=int, default=3, help="first ticks measured (one cluster each)")
    parser.add_argument(
        "--database-url",
        default="",
        help="one database to measure (default: SQLite in a temporary directory, then a scratch database on "
        "$RECOVERY_TEST_PG's PostgreSQL server)",
    )
    parser.add_argument("--smoke", action="store_true", help="small run for CI (5,000 jobs, paired medians of 5)")
    arguments = parser.parse_args()
    arguments.enrolled = arguments.enrolled or arguments.jobs // 10
    if arguments.smoke:
        # Big enough that fixed costs do not swamp the ratios, paired and with enough rounds for a stable median
        arguments.jobs, arguments.enrolled, arguments.repeat, arguments.first_ticks = 5_000, 500, 5, 2
    asyncio.run(main(arguments))
