"""kill -9 of a real `recovery worker` mid-hang on the lab: the hang's clock and the lease survive the restart.

The hang detector's timer is stored (log_sources.hang_*), so the restarted worker fires the
NO_PROGRESS anomaly at last output + threshold + query delay, not a query delay after its own start.
The restarted worker has the same persisted identity (data dir instance id + host), so it takes its
own lease back at once, under a new epoch, instead of waiting for it to lapse.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import select

from app.evidence.models import Anomaly, LogSource
from app.infra.config import Settings
from app.infra.context import AppContext
from app.infra.db import create_engine, session_factory, utcnow
from app.infra.migrate import upgrade
from app.jobs.models import Attempt
from app.leases.models import WorkerLease
from tests.e2e.harness import batch_script, eventually
from tests.plugins import require
from tests.plugins.database import create_postgres_database, drop_postgres_database
from tests.plugins.slurm_lab import SlurmLab

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
THRESHOLD = 5
QUERY_DELAY = 20
LEASE_SECONDS = 60
TS = "ts() { date -u +%Y-%m-%dT%H:%M:%S.%NZ; }"
BODY = f"""{TS}
echo "[$(ts)] [before the start of training step] datetime: $(ts)"
echo "[$(ts)] iteration 1/  100 | elapsed time per iteration (ms): 1000.0 | lm loss: 2.3E+00 |"
sleep 300
"""


@pytest.fixture(params=["sqlite", "postgres"])
async def shared_db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AppContext]:
    """A database of its own for this test, which the killed and the restarted worker process share."""
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path}/restart.db"
    else:
        try:
            url = await create_postgres_database()
        except Exception as exc:
            require("PostgreSQL", str(exc))
    engine = create_engine(url)
    await upgrade(engine)
    settings = Settings.build(
        database_url=url, data_dir=str(tmp_path), cluster="restart", environment=f"restart-{uuid.uuid4().hex[:8]}"
    )
    try:
        yield AppContext(settings=settings, engine=engine, sessions=session_factory(engine))
    finally:
        await engine.dispose()
        if request.param == "postgres":
            await drop_postgres_database(url)


def policy(environment: str) -> str:
    body = {
        "workflow_id": f"wf-{uuid.uuid4().hex[:6]}",
        "environment": environment,
        "mode": "observe",
        "auto_resume_mode": "requeue",
        "anomaly_detection_config": {
            "log_based_timeout_threshold_pretraining": THRESHOLD,
            "log_based_timeout_threshold_trainingloop": THRESHOLD,
        },
    }
    return json.dumps({"APS": body}, separators=(",", ":"))


def start(ctx: AppContext, lab: SlurmLab, log: Path) -> subprocess.Popen[bytes]:
    env = lab.env(
        RECOVERY_DATABASE_URL=ctx.settings.database_url,
        RECOVERY_DATA_DIR=ctx.settings.data_dir,
        RECOVERY_CLUSTER=ctx.settings.cluster,
        RECOVERY_ENVIRONMENT=ctx.settings.environment,
        RECOVERY_POLL_INTERVAL="0.3",
        RECOVERY_LEASE_SECONDS=str(LEASE_SECONDS),
        RECOVERY_HANG_QUERY_DELAY=str(QUERY_DELAY),
        RECOVERY_LOG_LEVEL="INFO",
    )
    env.pop("RECOVERY_FAULT_INJECT", None)
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "app.cli", "worker"], env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT
        )


async def _timer(ctx: AppContext, job_id: int) -> LogSource | None:
    async with ctx.sessions() as session:
        row = await session.scalar(
            select(LogSource)
            .join(Attempt, Attempt.job_id == LogSource.job_id)
            .where(Attempt.slurm_job_id == job_id, LogSource.hang_delay_started_at.is_not(None))
        )
        return row


async def _anomaly(ctx: AppContext, job_id: int) -> Anomaly | None:
    async with ctx.sessions() as session:
        return await session.scalar(
            select(Anomaly)
            .join(Attempt, Attempt.id == Anomaly.attempt_id)
            .where(Attempt.slurm_job_id == job_id, Anomaly.kind == "NO_PROGRESS")
        )


async def _lease(ctx: AppContext) -> WorkerLease | None:
    async with ctx.sessions() as session:
        return await session.get(WorkerLease, f"worker:{ctx.settings.cluster}", populate_existing=True)


async def test_kill_9_mid_hang_keeps_the_hang_clock_and_reclaims_the_lease(
    shared_db: AppContext,
    slurm_lab: SlurmLab,
) -> None:
    ctx = shared_db
    log = slurm_lab.test_dir() / f"worker-{uuid.uuid4().hex[:6]}.log"
    first = start(ctx, slurm_lab, log)
    second: subprocess.Popen[bytes] | None = None
    try:
        job_id = slurm_lab.submit(batch_script(policy(ctx.settings.environment), BODY, name="hang-restart"))
        timer = await eventually(lambda: _timer(ctx, job_id), what="the hang timer expired (query delay started)")
        before = await _lease(ctx)
        assert before is not None and before.expires_at is not None and before.expires_at > utcnow()
        first.send_signal(signal.SIGKILL)
        first.wait(30)
        await asyncio.sleep(3)  # the worker is down for a while
        restarted_at = utcnow()
        second = start(ctx, slurm_lab, log)
        reclaimed = await eventually(
            lambda: _reclaimed(ctx, before.epoch), timeout=60, what="the restarted worker holds the lease"
        )
        anomaly = await eventually(lambda: _anomaly(ctx, job_id), timeout=120, what="NO_PROGRESS after the restart")
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.terminate()
                process.wait(30)
    text = log.read_text()
    # Lease: the same identity took its own lease back while the dead process's lease was still unexpired.
    assert reclaimed.holder == before.holder and reclaimed.epoch == before.epoch + 1
    assert reclaimed.renewed_at < before.expires_at, text[-3000:]
    assert "reclaimed from this worker's previous process" in text
    # Hang: the anomaly's times come from the stored timer and the last output, not from the restart.
    details = anomaly.details
    delay_started = dt.datetime.fromisoformat(details["queryDelayStartedAt"])
    last_output = dt.datetime.fromisoformat(details["lastOutputAt"])
    assert timer.hang_delay_started_at is not None
    assert delay_started == timer.hang_delay_started_at < restarted_at
    assert (delay_started - last_output).total_seconds() >= THRESHOLD
    assert (anomaly.detected_at - last_output).total_seconds() >= THRESHOLD + QUERY_DELAY
    # A reset clock would have waited a full query delay after the restart.
    assert anomaly.detected_at < restarted_at + dt.timedelta(seconds=QUERY_DELAY), (anomaly.detected_at, restarted_at)


async def _reclaimed(ctx: AppContext, epoch: int) -> WorkerLease | None:
    lease = await _lease(ctx)
    return lease if lease is not None and lease.epoch > epoch else None
