"""Real collectors' clients push a real job's output to a running `recovery serve` (both databases).

The OpenTelemetry SDK's OTLP/HTTP log exporter and winston-loki (a Loki push client: protobuf + snappy)
send what a real PyTorch job printed (tests/fixtures/real-jobs); the service must record its crash and
checkpoint on the right attempt, count a replayed batch without recording anything twice, and attribute
lines pushed out of order across streams by their source time.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import func, select

from app.evidence.models import Anomaly, Checkpoint, PendingLogEvent
from app.infra.context import AppContext
from app.ingest import queries as ingest_queries
from tests.api.helpers import LiveServer
from tests.factories import add_attempt, anomalies, checkpoints, enrolled_job
from tests.ingest.helpers import loki_push, otel_export, otel_records, real_lines

NOW = dt.datetime.now(dt.UTC)


async def counts(ctx: AppContext) -> dict[str, int]:
    async with ctx.sessions() as session:
        return await ingest_queries.push_counts(session)


async def test_otlp_exporter_crash_is_recorded_once_and_a_replay_adds_nothing(
    ctx: AppContext, server: LiveServer
) -> None:
    job = await enrolled_job(ctx, 7101)
    attempt = await add_attempt(ctx, job, 0, start_time=NOW - dt.timedelta(hours=1))
    lines = real_lines("ddp-raise.log", until="attempt 1")
    resource = {
        "slurm.job.id": "7101",
        "host.name": "node2",
        "log.file.path": "/shared/out/ddp-raise-7101.log",
        "cluster": ctx.settings.cluster,
    }
    records = otel_records(lines, resource)
    assert otel_export(server, records, gzip=True)
    crashes = await anomalies(ctx, Anomaly.attempt_id == attempt.id, Anomaly.kind == "CRASH")
    assert crashes, server.log()
    saved = await checkpoints(ctx, Checkpoint.attempt_id == attempt.id)
    assert [c.iteration for c in saved] == [5]
    before = await counts(ctx)
    assert before["lines"] == len(lines) and before["replayed"] == 0

    assert otel_export(server, records)  # the collector retries the same batch (a timeout on its side)

    after = await counts(ctx)
    assert after["lines"] == len(lines) and after["replayed"] == len(lines)
    assert len(await anomalies(ctx, Anomaly.attempt_id == attempt.id)) == len(crashes)
    assert len(await checkpoints(ctx, Checkpoint.attempt_id == attempt.id)) == 1


async def test_loki_client_lines_out_of_order_across_streams_go_to_the_attempt_of_their_time(
    ctx: AppContext, server: LiveServer
) -> None:
    job = await enrolled_job(ctx, 7102)
    first_start = NOW - dt.timedelta(hours=2)
    first_end = NOW - dt.timedelta(hours=1)
    first = await add_attempt(ctx, job, 0, state="FAILED", start_time=first_start, end_time=first_end)
    second = await add_attempt(ctx, job, 1, start_time=first_end + dt.timedelta(minutes=1))
    crash = real_lines("ddp-raise.log", until="attempt 1")
    labels = {"slurm_job_id": "7102", "cluster": ctx.settings.cluster, "filename": "/shared/out/train.log"}
    # the retry's stream (node1) arrives first; the first attempt's (node2) is pushed late by its agent
    newer = [(NOW - dt.timedelta(minutes=5) + dt.timedelta(milliseconds=i), line) for i, line in enumerate(crash)]
    older = [(first_start + dt.timedelta(minutes=5, milliseconds=i), line) for i, line in enumerate(crash)]
    answer = loki_push(server, newer, {**labels, "node": "node1"})
    assert answer["errors"] == [] and answer["json"] is False, answer
    answer = loki_push(server, older, {**labels, "node": "node2"})
    assert answer["errors"] == [], answer

    on_first = await anomalies(ctx, Anomaly.attempt_id == first.id, Anomaly.kind == "CRASH")
    on_second = await anomalies(ctx, Anomaly.attempt_id == second.id, Anomaly.kind == "CRASH")
    assert on_first and on_second, server.log()
    assert all(a.source_time is not None and a.source_time < first_end for a in on_first)
    assert all(a.source_time is not None and a.source_time > first_end for a in on_second)


async def test_loki_json_lines_of_a_job_not_yet_known_wait_and_of_an_unenrolled_job_are_dropped(
    ctx: AppContext, server: LiveServer
) -> None:
    crash = real_lines("ddp-raise.log", until="attempt 1")
    entries = [(NOW - dt.timedelta(seconds=30) + dt.timedelta(milliseconds=i), line) for i, line in enumerate(crash)]
    labels = {"slurm_job_id": "7103", "cluster": ctx.settings.cluster, "slurm_job_attempt": "0", "node": "node2"}
    assert loki_push(server, entries, labels, json_body=True)["errors"] == []
    async with ctx.sessions() as session:
        waiting = await session.scalar(select(func.count()).select_from(PendingLogEvent))
    assert waiting, server.log()  # the crash waits in the bounded redelivery for job 7103 to be registered

    await enrolled_job(ctx, 7104)
    async with ctx.sessions() as session, session.begin():
        from app.jobs.models import Job

        row = (await session.execute(select(Job).where(Job.slurm_job_id == 7104))).scalar_one()
        row.enrolment = "NOT_ENROLLED"
    answer = loki_push(server, entries, {**labels, "slurm_job_id": "7104"})
    assert answer["errors"] == []
    assert (await counts(ctx))["dropped"] == len(crash)
