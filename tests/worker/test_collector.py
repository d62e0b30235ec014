"""Collector on both databases: per-attempt and shared paths, restarts, stale paths, waiting events, bad bytes."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from sqlalchemy import update as sql_update

from app.domain.detection.rules_file import SignatureConfigError
from app.evidence.models import Anomaly, LogSource
from app.infra.context import AppContext
from app.jobfiles.reader import LogTailer
from app.jobs.models import Attempt
from tests.factories import add_attempt, anomalies, checkpoints, enrolled_job, events, pending, sources, update
from tests.worker.helpers import CRASH, ITERATION, Clock, collector_for
from worker.collector import Collector, load_ruleset

XID = (
    "Nov 30 02:34:15 node12 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=12345, name=python, GPU "
    "has fallen off the bus.\n"
)
SAVED = "  successfully saved checkpoint from iteration     500 to /ckpt/gpt3 [ t 1/8, p 1/4 ]\n"


def stamp(seconds_ago: float = 0.0) -> str:
    return (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def test_per_attempt_file_becomes_evidence_on_its_attempt(ctx: AppContext, tmp_path: Path) -> None:
    out = tmp_path / "out-10.log"
    out.write_text("setup\n" + ITERATION + SAVED + XID)
    job = await enrolled_job(ctx, 10)
    a0 = await add_attempt(ctx, job, 0, stdout_path=str(out), stderr_path=str(out), start_time=dt.datetime.now(dt.UTC))
    collector = collector_for(ctx)
    await collector.tick()
    [checkpoint] = await checkpoints(ctx)
    assert (checkpoint.attempt_id, checkpoint.kind, checkpoint.iteration, checkpoint.line_number) == (
        a0.id,
        "saved",
        500,
        3,
    )
    [crash] = await anomalies(ctx)
    assert (crash.attempt_id, crash.kind, crash.category, crash.node, crash.xid, crash.line_number) == (
        a0.id,
        "CRASH",
        "XID",
        "node12",
        79,
        4,
    )
    assert crash.log_path == str(out) and "NVRM: Xid" in (crash.line or "") and crash.source_time is not None
    [source] = await sources(ctx)
    assert (source.attempt_id, source.shared, source.offset, source.line_number) == (
        a0.id,
        False,
        out.stat().st_size,
        4,
    )
    assert (
        source.progress_phase == "trainingloop"
        and source.progress_attempt_id == a0.id
        and source.last_read_at is not None
    )
    assert source.last_output_at is not None and source.head_length > 0
    async with ctx.sessions() as session:  # goodput's first progress line of the attempt
        assert (await session.get(Attempt, a0.id)).first_progress_at == source.progress_at  # type: ignore[union-attr]
    [detected] = await events(ctx, "anomaly.detected")
    assert detected.component == "watcher" and detected.attempt_index == 0
    assert {"file", "lineNumber", "line", "sourceTime"} <= set(detected.payload) and detected.payload["lineNumber"] == 4
    [saved] = await events(ctx, "checkpoint.saved")
    assert saved.component == "collector" and saved.payload["file"] == str(out)


async def test_new_bytes_only_and_anomaly_wakes_listener(ctx: AppContext, tmp_path: Path) -> None:
    out = tmp_path / "out-11.log"
    out.write_text(ITERATION)
    job = await enrolled_job(ctx, 11)
    await add_attempt(ctx, job, 0, stdout_path=str(out))
    collector = collector_for(ctx)
    woken: list[int] = []
    collector.on_anomaly.append(lambda: woken.append(1))
    await collector.tick()
    assert woken == [] and await anomalies(ctx) == []
    with out.open("a") as handle:
        handle.write(CRASH)
    collector._dirty.add(str(out))
    await collector.tick()
    assert len(await anomalies(ctx)) == 1 and woken == [1]


async def test_restart_records_nothing_twice(ctx: AppContext, tmp_path: Path) -> None:
    out = tmp_path / "out-12.log"
    out.write_text(SAVED + CRASH)
    job = await enrolled_job(ctx, 12)
    await add_attempt(ctx, job, 0, stdout_path=str(out))
    first = collector_for(ctx)
    await first.tick()
    await first.on_stop()
    with out.open("a") as handle:
        handle.write(XID)
    second = collector_for(ctx)  # a new process: same database, same files
    await second.tick()
    assert len(await checkpoints(ctx)) == 1
    assert sorted(a.category for a in await anomalies(ctx)) == ["CUDA_ERROR", "XID"]
    # Even if the saved offset were lost, re-reading the same bytes yields the same identities.
    async with ctx.sessions() as session, session.begin():
        await session.execute(sql_update(LogSource).values(offset=0, line_number=0, head_length=0, head_digest=None))
    third = collector_for(ctx)
    await third.tick()
    assert len(await checkpoints(ctx)) == 1 and len(await anomalies(ctx)) == 2
    assert len(await events(ctx, "anomaly.detected")) == 2 and len(await events(ctx, "checkpoint.saved")) == 1


async def test_repeated_crash_lines_of_one_category_and_node_are_one_anomaly(ctx: AppContext, tmp_path: Path) -> None:
    out = tmp_path / "out-13.log"
    out.write_text(CRASH * 8 + XID + XID.replace("node12", "node13"))
    job = await enrolled_job(ctx, 13)
    await add_attempt(ctx, job, 0, stdout_path=str(out))
    await collector_for(ctx).tick()
    assert sorted((a.category, a.node) for a in await anomalies(ctx)) == [
        ("CUDA_ERROR", None),
        ("XID", "node12"),
        ("XID", "node13"),
    ]


async def test_truncation_rotation_and_late_files(ctx: AppContext, tmp_path: Path) -> None:
    out = tmp_path / "out-14.log"
    job = await enrolled_job(ctx, 14)
    await add_attempt(ctx, job, 0, stdout_path=str(out))
    collector = collector_for(ctx, collector_poll_interval=0.0)
    await collector.tick()  # the file does not exist yet
    out.write_text(SAVED)
    await collector.tick()
    assert len(await checkpoints(ctx)) == 1
    os.rename(out, tmp_path / "out-14.log.1")
    out.write_text(SAVED.replace("500", "600"))
    await collector.tick()
    await collector.tick()
    out.write_text(SAVED.replace("500", "700") + "x" * 10)  # truncated and rewritten
    await collector.tick()
    assert [c.iteration for c in sorted(await checkpoints(ctx), key=lambda c: c.iteration or 0)] == [500, 600, 700]


async def test_stale_path_stays_with_the_old_attempt(ctx: AppContext, tmp_path: Path) -> None:
    out = tmp_path / "out-15.log"
    out.write_text(ITERATION)
    job = await enrolled_job(ctx, 15)
    a0 = await add_attempt(ctx, job, 0, stdout_path=str(out), start_time=dt.datetime.now(dt.UTC))
    collector = collector_for(ctx, collector_poll_interval=0.0)
    await collector.tick()
    ended = dt.datetime.now(dt.UTC)
    await update(ctx, a0, state="REQUEUED", end_time=ended)
    a1 = await add_attempt(ctx, job, 1, stdout_path=None)  # the observer withholds the stale path
    with out.open("a") as handle:
        handle.write(CRASH)  # a late line of attempt 0, no timestamp
    collector.poke()
    await collector.tick()
    [crash] = await anomalies(ctx)
    assert crash.attempt_id == a0.id
    # Attempt 1 truncates the file (default open mode) and writes: not attempt 0's evidence.
    out.write_text(XID)
    await collector.tick()
    assert [a.attempt_id for a in await anomalies(ctx)] == [a0.id]
    [dropped] = await events(ctx, "collector.event_dropped")
    assert dropped.payload["reason"] == "after_attempt_end" and dropped.attempt_index == 0
    [source] = await sources(ctx)
    assert source.closed_at is not None and source.attempt_id == a0.id
    assert a1.id not in {a.attempt_id for a in await anomalies(ctx)}


async def test_lines_stamped_after_the_owner_ended_are_dropped(ctx: AppContext, tmp_path: Path) -> None:
    out = tmp_path / "out-16.log"
    out.write_text(ITERATION)
    job = await enrolled_job(ctx, 16)
    a0 = await add_attempt(ctx, job, 0, stdout_path=str(out))
    collector = collector_for(ctx, collector_poll_interval=0.0)
    await collector.tick()
    await update(ctx, a0, state="FAILED", end_time=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=20))
    with out.open("a") as handle:
        handle.write(f"[{stamp(25)}] {CRASH}")
        handle.write(f"[{stamp(0)}] {XID}")
    collector.poke()
    await collector.tick()
    assert [a.category for a in await anomalies(ctx)] == ["CUDA_ERROR"]
    assert len(await events(ctx, "collector.event_dropped")) == 1


async def test_ended_attempt_is_read_a_last_time_then_no_longer_tracked(ctx: AppContext, tmp_path: Path) -> None:
    out = tmp_path / "out-17.log"
    out.write_text(ITERATION)
    job = await enrolled_job(ctx, 17)
    a0 = await add_attempt(ctx, job, 0, stdout_path=str(out))
    clock = Clock(dt.datetime.now(dt.UTC))
    collector = collector_for(ctx, clock, collector_ended_grace=5.0)
    await collector.tick()
    with out.open("a") as handle:
        handle.write(SAVED)
    await update(ctx, a0, state="COMPLETED", end_time=clock.now)
    clock.advance(60)
    collector.poke()
    await collector.tick()
    assert len(await checkpoints(ctx)) == 1  # the final read
    [source] = await sources(ctx)
    assert source.closed_at is not None and collector.tracked == {}


async def test_shared_path_label_time_window_and_waiting(ctx: AppContext, tmp_path: Path) -> None:
    out = tmp_path / "shared-18.log"
    now = dt.datetime.now(dt.UTC)
    job = await enrolled_job(ctx, 18, shared=True)
    a0 = await add_attempt(
        ctx,
        job,
        0,
        state="FAILED",
        stdout_path=str(out),
        start_time=now - dt.timedelta(seconds=300),
        end_time=now - dt.timedelta(seconds=200),
    )
    a1 = await add_attempt(ctx, job, 1, stdout_path=str(out), start_time=now - dt.timedelta(seconds=100))
    out.write_text(
        f"[{stamp(250)}] {SAVED}"  # attempt 0 by its window
        + f"slurm_job_attempt=1 {CRASH}"  # attempt 1 by its label
        + f"[{stamp(150)}] {XID}"  # between the windows: waits
        + SAVED.replace("500", "900")  # no time, no label: waits
    )
    clock = Clock(now)
    collector = collector_for(ctx, clock)
    await collector.tick()
    [saved] = await checkpoints(ctx)
    assert (saved.attempt_id, saved.iteration) == (a0.id, 500)
    [crash] = await anomalies(ctx)
    assert (crash.attempt_id, crash.category) == (a1.id, "CUDA_ERROR")
    waiting = await pending(ctx)
    assert [p.reason for p in sorted(waiting, key=lambda p: p.reason or "")] == ["no_timestamp", "outside_windows"]
    [source] = await sources(ctx)
    assert source.shared and source.attempt_id is None
    # Bounded redelivery: six tries with backoff, then dropped with an audit event; never the newest attempt.
    for _ in range(7):
        clock.advance(70)
        await collector.tick()
    assert await pending(ctx) == []
    dropped = await events(ctx, "collector.event_dropped")
    assert sorted(d.payload["reason"] for d in dropped) == ["no_timestamp", "outside_windows"]
    assert all(d.payload["tries"] == 6 for d in dropped)
    assert len(await anomalies(ctx)) == 1 and len(await checkpoints(ctx)) == 1


async def test_waiting_event_lands_once_its_attempt_is_registered(ctx: AppContext, tmp_path: Path) -> None:
    out = tmp_path / "shared-19.log"
    now = dt.datetime.now(dt.UTC)
    job = await enrolled_job(ctx, 19, shared=True)
    await add_attempt(
        ctx,
        job,
        0,
        state="FAILED",
        stdout_path=str(out),
        start_time=now - dt.timedelta(seconds=300),
        end_time=now - dt.timedelta(seconds=10),
    )
    out.write_text(f"slurm_job_attempt=1 {CRASH}")
    collector = collector_for(ctx, Clock(now))
    await collector.tick()
    assert [p.reason for p in await pending(ctx)] == ["label_not_registered"]
    a1 = await add_attempt(ctx, job, 1, stdout_path=str(out), start_time=now)
    collector.poke()  # what the observer does when it records the attempt
    await collector.tick()
    [crash] = await anomalies(ctx)
    assert crash.attempt_id == a1.id and await pending(ctx) == []


async def test_log_directory_files_by_job_id_and_attempt_in_the_name(ctx: AppContext, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    job = await enrolled_job(ctx, 4321)
    a0 = await add_attempt(ctx, job, 0, state="FAILED", end_time=dt.datetime.now(dt.UTC))
    a1 = await add_attempt(ctx, job, 1)
    (logs / "train-4321-0.log").write_text(SAVED)
    (logs / "train-4321-1.log").write_text(CRASH)
    (logs / "train-4321-2.log").write_text(XID)  # attempt 2 is not registered yet: not read yet
    (logs / "train-99999-1.log").write_text(CRASH)  # another job
    await collector_for(ctx, log_dirs=(str(logs),)).tick()
    [saved] = await checkpoints(ctx)
    [crash] = await anomalies(ctx)
    assert saved.attempt_id == a0.id and crash.attempt_id == a1.id
    assert sorted(Path(s.path).name for s in await sources(ctx)) == ["train-4321-0.log", "train-4321-1.log"]


async def test_broken_signatures_file_refuses_to_start(ctx: AppContext, tmp_path: Path) -> None:
    bad = tmp_path / "signatures.toml"
    bad.write_text("[[crash]]\nname = 'x'\npattern = '('\n")
    with pytest.raises(SignatureConfigError):
        load_ruleset(dataclasses.replace(ctx.settings, signatures_file=str(bad)))
    with pytest.raises(SignatureConfigError):
        Collector(dataclasses.replace(ctx, settings=dataclasses.replace(ctx.settings, signatures_file=str(bad))))
    good = tmp_path / "ok.toml"
    good.write_text("[[crash]]\nname = 'app_fatal'\ncategory = 'APP_FATAL'\npattern = 'FATAL: (?P<detail>.+)'\n")
    assert load_ruleset(dataclasses.replace(ctx.settings, signatures_file=str(good))).by_name("app_fatal") is not None


@hsettings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    chunks=st.lists(
        st.binary(max_size=3000)
        | st.sampled_from(
            [CRASH.encode(), SAVED.encode(), b"\xff\xfe\r\n", b"\n" * 50, b"Traceback (most recent call last):\n"]
        ),
        max_size=8,
    )
)
async def test_no_bytes_break_the_collector(
    ctx: AppContext, tmp_path_factory: pytest.TempPathFactory, chunks: list[bytes]
) -> None:
    from app.infra.db import utcnow

    directory = tmp_path_factory.mktemp("bytes")
    out = directory / "out.log"
    out.touch()
    async with ctx.sessions() as session, session.begin():
        from sqlalchemy import select

        from app.jobs.models import Job

        job = await session.scalar(select(Job).where(Job.slurm_job_id == 777))
    if job is None:
        job = await enrolled_job(ctx, 777)
    attempt = await add_attempt(ctx, job, int(utcnow().timestamp() * 1000) % 1_000_000, stdout_path=str(out))
    collector = Collector(ctx, tailer=LogTailer(chunk_size=4096, line_cap=1024, max_bytes=8192), use_inotify=False)
    for chunk in chunks:
        with out.open("ab") as handle:
            handle.write(chunk)
        await collector.tick()
        assert collector.failures == 0
    collector._poll_at = None
    await collector.tick()
    async with ctx.sessions() as session:
        from sqlalchemy import select

        source = await session.scalar(select(LogSource).where(LogSource.attempt_id == attempt.id))
        assert source is not None and 0 <= source.offset <= out.stat().st_size
        crash_rows = (await session.scalars(select(Anomaly).where(Anomaly.attempt_id == attempt.id))).all()
    assert all(row.line_number is not None and row.line_number >= 1 for row in crash_rows)
    await collector.on_stop()


async def test_file_changes_wake_the_running_service_before_the_next_poll(ctx: AppContext, tmp_path: Path) -> None:
    import asyncio
    import time

    out = tmp_path / "out-20.log"
    out.write_text(ITERATION)
    job = await enrolled_job(ctx, 20)
    await add_attempt(ctx, job, 0, stdout_path=str(out))
    slow_poll = dataclasses.replace(ctx, settings=dataclasses.replace(ctx.settings, collector_poll_interval=30.0))
    collector = Collector(slow_poll, use_inotify=True)
    collector.interval = 30.0  # only a wake-up can make it read again within the test
    collector.start()
    try:
        deadline = time.monotonic() + 5
        while collector.ticks < 1 or collector._watch_task is None:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # let the watcher settle
        with out.open("a") as handle:
            handle.write(CRASH)
        deadline = time.monotonic() + 5
        while not await anomalies(ctx):
            assert time.monotonic() < deadline, "no wake-up from the file change"
            await asyncio.sleep(0.05)
    finally:
        await collector.stop()
