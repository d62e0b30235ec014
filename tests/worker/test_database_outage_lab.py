"""PostgreSQL (a server of the test's own) stops between `requeuehold` and `release` of a real recovery on the lab.

The worker (a real `recovery worker` process) is paused by the test-only fault hook right after
`scontrol requeuehold` returned; the test stops PostgreSQL there, lets the worker go on (it cannot
record the result), keeps the database away for a while and starts it again. Expected: the worker
stays up, backs off and resumes; the hold is confirmed from Slurm (and recorded as
`scheduler.requeue_hold`), the exclusions and the release follow once each, Slurm's restart count is 1.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from app.audit.models import AuditEvent
from app.infra.config import Settings
from app.infra.context import AppContext
from app.infra.db import create_engine, session_factory
from app.infra.migrate import upgrade
from tests.e2e.harness import advice_done, attempt_running, batch_script, eventually, milestones, policy_comment
from tests.factories import add_anomaly
from tests.plugins.own_postgres import OwnPostgres
from tests.plugins.slurm_lab import SlurmLab

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
JOB = """\
if [ -z "$SLURM_RESTART_COUNT" ]; then sleep 120; exit 0; fi
echo "attempt $SLURM_RESTART_COUNT on $SLURMD_NODENAME"; sleep 2
"""
OUTAGE_SECONDS = 10


@pytest.fixture
async def own_db(own_postgres: OwnPostgres, tmp_path: Path) -> AsyncIterator[AppContext]:
    engine = create_engine(own_postgres.url)
    await upgrade(engine)
    settings = Settings.build(
        database_url=own_postgres.url,
        data_dir=str(tmp_path / "data"),
        cluster="outage",
        environment=f"outage-{uuid.uuid4().hex[:8]}",
    )
    try:
        yield AppContext(settings=settings, engine=engine, sessions=session_factory(engine))
    finally:
        await engine.dispose()


def start_worker(ctx: AppContext, lab: SlurmLab, log: Path) -> subprocess.Popen[bytes]:
    env = lab.env(
        RECOVERY_DATABASE_URL=ctx.settings.database_url,
        RECOVERY_DATA_DIR=ctx.settings.data_dir,
        RECOVERY_CLUSTER=ctx.settings.cluster,
        RECOVERY_ENVIRONMENT=ctx.settings.environment,
        RECOVERY_ACKNOWLEDGE_SCHEDULER_ACTIONS="true",
        RECOVERY_POLL_INTERVAL="0.3",
        RECOVERY_LEASE_SECONDS="6",
        RECOVERY_FAULT_INJECT="pause-after:requeue_hold",
    )
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.fault_worker"], env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT
        )


async def _count(ctx: AppContext, job_id: int, event_type: str) -> int:
    async with ctx.sessions() as session:
        query = select(func.count()).select_from(AuditEvent)
        return int(
            await session.scalar(query.where(AuditEvent.slurm_job_id == job_id, AuditEvent.event_type == event_type))
            or 0
        )


async def test_postgres_away_between_requeuehold_and_release_neither_repeats_nor_loses_a_command(
    own_postgres: OwnPostgres, own_db: AppContext, slurm_lab: SlurmLab
) -> None:
    ctx = own_db
    Path(ctx.settings.data_dir).mkdir(parents=True, exist_ok=True)
    marker = Path(ctx.settings.data_dir) / "fault-paused"
    log = slurm_lab.test_dir() / f"worker-outage-{uuid.uuid4().hex[:6]}.log"
    worker = start_worker(ctx, slurm_lab, log)
    try:
        job_id = slurm_lab.submit(batch_script(policy_comment(ctx.settings.environment), JOB, name="db-outage"))
        a0 = await eventually(lambda: attempt_running(ctx, job_id, 0), what="attempt 0 running")
        bad = a0.nodes[0]
        await add_anomaly(ctx, job_id, kind="CRASH", node=bad, category="xid", key=f"xid-{uuid.uuid4().hex}")

        async def paused() -> bool:
            return marker.exists()

        await eventually(paused, what="the worker paused right after requeuehold")
        await asyncio.to_thread(own_postgres.stop)
        marker.unlink()  # the worker goes on: it cannot record the result
        await asyncio.sleep(OUTAGE_SECONDS)
        assert worker.poll() is None, log.read_text()[-3000:]  # still up while the database is away
        assert slurm_lab.scontrol_show(job_id)["Restarts"] == "1"  # the hold took effect meanwhile
        await asyncio.to_thread(own_postgres.start)
        advice = await eventually(lambda: advice_done(ctx, job_id, 0), timeout=180, what="Advice converged")
        await asyncio.sleep(1.5)  # room for a wrongly repeated command to show
        assert worker.poll() is None
    finally:
        if worker.poll() is None:
            worker.terminate()
            worker.wait(30)
    text = log.read_text()
    assert (advice.disposition, advice.disposition_reason) == ("CONVERGED", "DESIRED_STATE_OBSERVED"), text[-3000:]
    rows = await milestones(ctx, job_id)
    assert [(m.step, m.status) for m in rows] == [
        ("requeue_hold", "SUCCEEDED"),
        ("update_exclusions", "SUCCEEDED"),
        ("release", "SUCCEEDED"),
    ]
    shown = slurm_lab.scontrol_show(job_id)
    assert shown["Restarts"] == "1" and shown["ExcNodeList"] == bad and shown["Priority"] != "0"
    assert await _count(ctx, job_id, "scheduler.requeue_hold") == 1
    assert await _count(ctx, job_id, "scheduler.confirmed") == 1
    assert await _count(ctx, job_id, "scheduler.release") == 1
    # The outage was told in one line per failure, never as a crash.
    assert "database unavailable (DATABASE_UNAVAILABLE" in text and "Traceback" not in text, text[-3000:]
