"""No-output (hang) and slowdown detectors on both databases, with a fake clock."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from pathlib import Path

from app.evidence.models import LogSource
from app.infra.context import AppContext
from tests.factories import add_attempt, anomalies, enrolled_job, events, update
from tests.worker.helpers import Clock, collector_for
from worker.watcher import Watcher

PRE, LOOP, DELAY = 50, 30, 10


async def armed_source(
    ctx: AppContext,
    path: Path,
    *,
    attempt_id: int | None,
    job_id: int,
    phase: str | None,
    last_output: dt.datetime,
    progress_attempt_id: int | None = None,
) -> LogSource:
    path.write_text("x\n")
    old = last_output.timestamp()
    os.utime(path, (old, old))
    async with ctx.sessions() as session, session.begin():
        row = LogSource(
            path=str(path),
            job_id=job_id,
            attempt_id=attempt_id,
            shared=attempt_id is None,
            offset=2,
            line_number=1,
            progress_phase=phase,
            progress_at=last_output if phase else None,
            progress_line="iteration 5/100 |" if phase else None,
            progress_line_number=1 if phase else None,
            progress_attempt_id=progress_attempt_id or attempt_id,
            last_output_at=last_output,
        )
        session.add(row)
    return row


def watcher_for(ctx: AppContext, clock: Clock, **settings) -> Watcher:
    ctx = dataclasses.replace(ctx, settings=dataclasses.replace(ctx.settings, hang_query_delay=DELAY, **settings))
    return Watcher(ctx, clock=clock)


async def setup(
    ctx: AppContext, tmp_path: Path, *, phase: str | None = "trainingloop", state: str = "RUNNING", **detection
):
    job = await enrolled_job(
        ctx, 50, log_based_timeout_threshold_pretraining=PRE, log_based_timeout_threshold_trainingloop=LOOP, **detection
    )
    out = tmp_path / "out-50.log"
    start = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=3600)
    attempt = await add_attempt(ctx, job, 0, state=state, stdout_path=str(out), start_time=start)
    last = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1000)
    await armed_source(ctx, out, attempt_id=attempt.id, job_id=job.id, phase=phase, last_output=last)
    return job, attempt, out, last


async def run(watcher: Watcher, clock: Clock, seconds: float, step: float = 1.0) -> None:
    elapsed = 0.0
    while elapsed < seconds:
        await watcher.tick()
        clock.advance(step)
        elapsed += step


async def test_silence_past_threshold_and_query_delay_is_one_no_progress_anomaly(
    ctx: AppContext, tmp_path: Path
) -> None:
    job, attempt, out, last = await setup(ctx, tmp_path)
    clock = Clock(last + dt.timedelta(seconds=LOOP - 1))
    woken: list[int] = []
    watcher = watcher_for(ctx, clock)
    watcher.on_anomaly.append(lambda: woken.append(1))
    await run(watcher, clock, 1 + DELAY)  # expiry at LOOP, check at LOOP + DELAY: not yet
    assert await anomalies(ctx) == []
    await run(watcher, clock, 3)
    [anomaly] = await anomalies(ctx)
    assert (anomaly.kind, anomaly.category, anomaly.detector, anomaly.attempt_id) == (
        "NO_PROGRESS",
        "NO_OUTPUT_TRAININGLOOP",
        "noprogress",
        attempt.id,
    )
    assert anomaly.log_path == str(out) and anomaly.details["thresholdSeconds"] == LOOP and woken == [1]
    await run(watcher, clock, 100)
    assert len(await anomalies(ctx)) == 1  # once per silence episode
    [event] = await events(ctx, "anomaly.detected")
    assert (
        event.component == "watcher"
        and event.payload["file"] == str(out)
        and event.payload["line"].startswith("iteration")
    )


async def test_pretraining_phase_uses_its_own_threshold(ctx: AppContext, tmp_path: Path) -> None:
    _, _, _, last = await setup(ctx, tmp_path, phase="pretraining")
    clock = Clock(last + dt.timedelta(seconds=LOOP + DELAY + 2))
    watcher = watcher_for(ctx, clock)
    await run(watcher, clock, 5)
    assert await anomalies(ctx) == []  # the loop threshold has passed, the pretraining one has not
    await run(watcher, clock, PRE - LOOP + 2)
    assert [a.category for a in await anomalies(ctx)] == ["NO_OUTPUT_PRETRAINING"]


async def test_unarmed_file_is_never_a_hang(ctx: AppContext, tmp_path: Path) -> None:
    _, _, _, last = await setup(ctx, tmp_path, phase=None)
    clock = Clock(last + dt.timedelta(seconds=5000))
    await run(watcher_for(ctx, clock), clock, 20)
    assert await anomalies(ctx) == []


async def test_generic_training_started_line_does_not_arm(ctx: AppContext, tmp_path: Path) -> None:
    job = await enrolled_job(
        ctx, 51, log_based_timeout_threshold_trainingloop=LOOP, log_based_timeout_threshold_pretraining=PRE
    )
    out = tmp_path / "out-51.log"
    out.write_text("training started\nloading data\n")
    await add_attempt(ctx, job, 0, stdout_path=str(out))
    await collector_for(ctx).tick()
    [source] = await _sources(ctx)
    assert source.progress_phase is None
    out.write_text("training started\n[before the start of training step] datetime: 2026-11-30 02:34:15\n")
    await collector_for(ctx).tick()
    [source] = await _sources(ctx)
    assert source.progress_phase == "pretraining"


async def _sources(ctx: AppContext) -> list[LogSource]:
    from tests.factories import sources

    return await sources(ctx)


async def test_output_during_the_query_delay_suppresses(ctx: AppContext, tmp_path: Path) -> None:
    _, _, out, last = await setup(ctx, tmp_path)
    clock = Clock(last + dt.timedelta(seconds=LOOP + 1))
    watcher = watcher_for(ctx, clock)
    await watcher.tick()  # the timer expired
    late = clock.now + dt.timedelta(seconds=2)
    os.utime(out, (late.timestamp(), late.timestamp()))  # unrelated output arrives; the collector has not read it yet
    await run(watcher, clock, DELAY + 3)
    assert await anomalies(ctx) == []


async def test_not_running_or_disabled_means_no_anomaly(ctx: AppContext, tmp_path: Path) -> None:
    _, attempt, _, last = await setup(ctx, tmp_path, log_based_timeout_enabled=False)
    clock = Clock(last + dt.timedelta(seconds=LOOP + DELAY + 5))
    await run(watcher_for(ctx, clock), clock, DELAY + 5)
    assert await anomalies(ctx) == []


async def test_attempt_that_stopped_running_is_not_a_hang(ctx: AppContext, tmp_path: Path) -> None:
    _, attempt, _, last = await setup(ctx, tmp_path)
    await update(ctx, attempt, state="COMPLETING")
    clock = Clock(last + dt.timedelta(seconds=LOOP + 1))
    await run(watcher_for(ctx, clock), clock, DELAY + 5)
    assert await anomalies(ctx) == []


async def test_shared_file_armed_by_the_previous_attempt_does_not_arm_the_next(ctx: AppContext, tmp_path: Path) -> None:
    job = await enrolled_job(ctx, 52, shared=True, log_based_timeout_threshold_trainingloop=LOOP)
    out = tmp_path / "shared-52.log"
    now = dt.datetime.now(dt.UTC)
    a0 = await add_attempt(
        ctx,
        job,
        0,
        state="FAILED",
        stdout_path=str(out),
        start_time=now - dt.timedelta(seconds=900),
        end_time=now - dt.timedelta(seconds=600),
    )
    a1 = await add_attempt(ctx, job, 1, stdout_path=str(out), start_time=now - dt.timedelta(seconds=500))
    last = now - dt.timedelta(seconds=400)
    await armed_source(
        ctx, out, attempt_id=None, job_id=job.id, phase="trainingloop", last_output=last, progress_attempt_id=a0.id
    )
    clock = Clock(now)
    await run(watcher_for(ctx, clock), clock, DELAY + 3)
    assert await anomalies(ctx) == []
    async with ctx.sessions() as session, session.begin():
        row = (await session.scalars(__import__("sqlalchemy").select(LogSource))).one()
        row.progress_attempt_id = a1.id
    await run(watcher_for(ctx, clock), clock, DELAY + 3)
    assert [a.attempt_id for a in await anomalies(ctx)] == [a1.id]


THROUGHPUT = (
    " iteration {i:8d}/  500000 | consumed samples: 12800 | elapsed time per iteration "
    "(ms): {ms:.1f} | lm loss: 2.3E+00 |\n"
)


async def slowdown_run(ctx: AppContext, tmp_path: Path, *, operator: bool, job_opt_in: bool) -> list:
    job = await enrolled_job(ctx, 60, straggler_detection_enabled=job_opt_in)
    out = tmp_path / "out-60.log"
    out.write_text("")
    await add_attempt(ctx, job, 0, stdout_path=str(out))
    collector = collector_for(
        ctx, straggler_enabled=operator, straggler_duration=20.0, straggler_drop_ratio=0.7, collector_poll_interval=0.0
    )
    base = dt.datetime.now(dt.UTC)
    for i in range(40):
        ms = 1000.0 if i < 10 or i == 12 else 2000.0  # one slow sample at 12 (ignored), slow for good from 15
        if 12 < i < 15:
            ms = 1000.0
        stamp = (base + dt.timedelta(seconds=5 * i)).strftime("%Y-%m-%dT%H:%M:%SZ")
        with out.open("a") as handle:
            handle.write(f"[{stamp}]" + THROUGHPUT.format(i=i, ms=ms if i != 12 else 5000.0))
        await collector.tick()
    return await anomalies(ctx)


async def test_sustained_slowdown_is_an_anomaly_when_both_switches_are_on(ctx: AppContext, tmp_path: Path) -> None:
    [anomaly] = await slowdown_run(ctx, tmp_path, operator=True, job_opt_in=True)
    assert (anomaly.kind, anomaly.detector) == ("SLOWDOWN", "slowdown")
    assert anomaly.details["metric"] == "iter_ms" and anomaly.details["ratio"] < 0.7
    since = dt.datetime.fromisoformat(anomaly.details["since"])
    assert since > dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5 * 13)  # not the single slow sample at 12


async def test_slowdown_is_off_unless_operator_and_job_both_opt_in(ctx: AppContext, tmp_path: Path) -> None:
    assert await slowdown_run(ctx, tmp_path, operator=True, job_opt_in=False) == []


async def test_slowdown_needs_the_operator_switch(ctx: AppContext, tmp_path: Path) -> None:
    assert await slowdown_run(ctx, tmp_path, operator=False, job_opt_in=True) == []
