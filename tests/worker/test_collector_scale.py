"""A collector tick's SQL follows the changed files, not the tracked ones (SPEC §9), on both databases."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from sqlalchemy import event

from app.infra.context import AppContext
from app.infra.db import Base
from tests.factories import add_attempt, anomalies, enrolled_job, update
from tests.worker.helpers import CRASH, ITERATION, Clock, collector_for
from worker.collector import Collector


async def track(ctx: AppContext, directory: Path, first: int, count: int) -> list[Path]:
    """`count` enrolled jobs with a RUNNING attempt, each writing its own file."""
    paths = []
    for slurm_job_id in range(first, first + count):
        path = directory / f"out-{slurm_job_id}.log"
        path.write_text(ITERATION)
        job = await enrolled_job(ctx, slurm_job_id)
        await add_attempt(ctx, job, 0, stdout_path=str(path), start_time=dt.datetime.now(dt.UTC))
        paths.append(path)
    return paths


async def statements(ctx: AppContext, action: Callable[[], Awaitable[Any]]) -> tuple[int, int]:
    """(SQL statements sent, ORM rows loaded) while `action` runs."""
    counts = [0, 0]

    def sent(*args: Any) -> None:
        counts[0] += 1

    def loaded(*args: Any) -> None:
        counts[1] += 1

    event.listen(ctx.engine.sync_engine, "before_cursor_execute", sent)
    event.listen(Base, "load", loaded, propagate=True)
    try:
        await action()
    finally:
        event.remove(ctx.engine.sync_engine, "before_cursor_execute", sent)
        event.remove(Base, "load", loaded)
    return counts[0], counts[1]


async def tick_costs(
    ctx: AppContext, collector: Collector, clock: Clock, paths: list[Path], changed: list[Path]
) -> dict[str, tuple[int, int]]:
    """(statements, rows loaded) of: an idle poll tick (stats every file), a tick reading 2 changed files,
    a tick after an attempt change."""
    await collector.tick()  # settles whatever the previous phase left
    costs = {"idle": await statements(ctx, collector.tick)}
    for n, path in enumerate(changed):
        with path.open("a") as handle:
            handle.write(ITERATION + (CRASH if n == 0 else ""))
    costs["changed"] = await statements(ctx, collector.tick)
    assert collector.last_tick["read"] == len(changed) and collector.last_tick["candidates"] == len(collector.tracked)
    await update(ctx, await attempt_of(ctx, paths[-1]), nodes="gpu[01-02]")
    collector.poke()  # what the observer does after recording it
    clock.advance(0.1)
    costs["attempt changed"] = await statements(ctx, collector.tick)
    return costs


async def attempt_of(ctx: AppContext, path: Path) -> Any:
    from sqlalchemy import select

    from app.jobs.models import Attempt

    async with ctx.sessions() as session:
        return await session.scalar(select(Attempt).where(Attempt.stdout_path == str(path)))


async def test_tick_statements_do_not_grow_with_unchanged_files(ctx: AppContext, tmp_path: Path) -> None:
    clock = Clock(dt.datetime.now(dt.UTC))
    few = await track(ctx, tmp_path, 7000, 50)
    collector = collector_for(ctx, clock, collector_poll_interval=0.0)  # every tick polls (stats) every file
    await collector.tick()  # the first tick reads every file
    assert len(collector.tracked) == 50
    small = await tick_costs(ctx, collector, clock, few, few[:2])

    many = few + await track(ctx, tmp_path, 8000, 150)
    collector.poke()
    await collector.tick()  # the new jobs' files are discovered through the change feed and read once
    assert len(collector.tracked) == 200
    large = await tick_costs(ctx, collector, clock, many, many[100:102])

    assert small == large, (small, large)
    # an idle tick sends nothing: no event waits for its attempt, so not even the pending-events query
    assert large["idle"][0] == 0 and large["changed"][0] < 30 and large["attempt changed"][0] < 15, large
    # The changed files' evidence did land: a crash line in each phase.
    assert len(await anomalies(ctx)) == 2


async def test_ended_attempt_stops_being_read_when_its_grace_runs_out_without_another_change(
    ctx: AppContext, tmp_path: Path
) -> None:
    [out] = await track(ctx, tmp_path, 9100, 1)
    clock = Clock(dt.datetime.now(dt.UTC))
    collector = collector_for(ctx, clock, collector_ended_grace=5.0)
    await collector.tick()
    await update(ctx, await attempt_of(ctx, out), state="COMPLETED", end_time=clock.now)
    collector.poke()
    clock.advance(1)
    await collector.tick()
    assert [t.closing for t in collector.tracked.values()] == [False]  # within the grace period
    clock.advance(10)  # no feed entry, no poke: only the clock says the grace period is over
    await collector.tick()
    assert collector.tracked == {}


async def test_a_new_file_in_a_log_directory_is_found_by_polling_alone(ctx: AppContext, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    job = await enrolled_job(ctx, 9200)
    await add_attempt(ctx, job, 0)
    clock = Clock(dt.datetime.now(dt.UTC))
    collector = collector_for(ctx, clock, log_dirs=(str(logs),))
    await collector.tick()
    assert collector.tracked == {}
    (logs / "train-9200-0.log").write_text(CRASH)
    clock.advance(collector.settings.collector_poll_interval + 0.1)
    await collector.tick()
    assert [a.category for a in await anomalies(ctx)] == ["CUDA_ERROR"]


def test_an_idle_poll_looks_at_every_file_and_the_file_budget_counts_only_files_with_news(tmp_path: Path) -> None:
    from app.jobfiles.reader import FilePosition, LogTailer
    from app.jobfiles.safe_open import AccessRule
    from worker.collector.discovery import Tracked
    from worker.collector.reading import read_files

    tailer = LogTailer()
    mine = AccessRule(uid=os.getuid())
    tracked = []
    for n in range(8):
        path = tmp_path / f"{n}.log"
        path.write_text("step 1\n")
        tracked.append(Tracked(n, str(path), None, None, False, FilePosition(str(path))))
    reads, left = read_files(tailer, tracked, lambda _: mine)  # first look: every file has news
    assert (len(reads), left) == (8, [])
    for read in reads:
        read.tracked.read_from = read.position
    for n in (1, 4, 6):
        with open(tracked[n].path, "a") as handle:
            handle.write("step 2\n")
    reads, left = read_files(tailer, tracked, lambda _: mine, max_files=2)
    # the unchanged files cost a stat each; of the three changed, two are read and one waits for the next tick
    assert [r.tracked.source_id for r in reads] == [1, 4] and left == [tracked[6].path]
    for read in reads:
        read.tracked.read_from = read.position
    reads, left = read_files(tailer, tracked, lambda _: mine, max_files=2)
    assert [r.tracked.source_id for r in reads] == [6] and left == []
    tailer.close()
