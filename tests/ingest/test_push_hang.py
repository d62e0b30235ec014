"""A paused collector is not a hung job: NO_PROGRESS on a pushed stream needs its pipeline alive (both databases).

Real lines (tests/fixtures/real-jobs) are exported with the OpenTelemetry SDK to a running service; the
watcher runs in this process on the same database with a 2 s threshold and a 1 s query delay.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from app.evidence.models import Anomaly
from app.infra.context import AppContext
from app.infra.db import utcnow
from tests.api.helpers import LiveServer
from tests.factories import add_attempt, anomalies, enrolled_job
from tests.ingest.helpers import otel_export, otel_records, real_lines
from worker.watcher import Watcher


def resource(ctx: AppContext, job: int, node: str, path: str) -> dict[str, str]:
    return {"slurm.job.id": str(job), "host.name": node, "log.file.path": path, "cluster": ctx.settings.cluster}


async def watch(watcher: Watcher, seconds: float, keep_alive: object = None) -> None:
    """Tick the watcher for `seconds`; `keep_alive()` (another stream's push) runs between ticks."""
    end = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < end:
        if callable(keep_alive):
            await asyncio.to_thread(keep_alive)
        await watcher.tick()
        await asyncio.sleep(0.5)


async def test_silent_collector_raises_no_hang_but_a_silent_job_in_a_live_pipeline_does(
    ctx: AppContext, server: LiveServer
) -> None:
    progress = real_lines("ddp-raise.log", until="saved checkpoint")
    other = real_lines("ddp-clean.log")[:2]
    watcher = Watcher(dataclasses.replace(ctx, settings=dataclasses.replace(ctx.settings, hang_query_delay=1.0)))
    thresholds: dict[str, Any] = {
        "log_based_timeout_threshold_pretraining": 2,
        "log_based_timeout_threshold_trainingloop": 2,
    }
    start = utcnow().replace(microsecond=0)

    quiet = await enrolled_job(ctx, 7201, **thresholds)
    quiet_attempt = await add_attempt(ctx, quiet, 0, start_time=start.replace(year=start.year - 1))
    assert otel_export(server, otel_records(progress, resource(ctx, 7201, "node1", "/out/a.log")))
    await watch(watcher, 6.0)  # the collector of node1 went away: nothing arrives from it at all
    assert await anomalies(ctx, Anomaly.attempt_id == quiet_attempt.id) == []

    silent = await enrolled_job(ctx, 7202, **thresholds)
    silent_attempt = await add_attempt(ctx, silent, 0, start_time=start.replace(year=start.year - 1))
    assert otel_export(server, otel_records(progress, resource(ctx, 7202, "node2", "/out/b.log")))

    def another_stream() -> None:  # the same node's agent still pushes another file
        assert otel_export(server, otel_records(other, resource(ctx, 7202, "node2", "/out/b.err")))

    await watch(watcher, 6.0, keep_alive=another_stream)
    hangs = await anomalies(ctx, Anomaly.attempt_id == silent_attempt.id, Anomaly.kind == "NO_PROGRESS")
    assert len(hangs) == 1, server.log()
    pipeline = hangs[0].details["pipeline"]
    assert pipeline["alive"] is True and pipeline["node"] == "node2" and pipeline["otherStreamsArriving"] >= 1
