"""Kill -9 of a real `recovery worker` at every step boundary of a reconciliation, on the real Slurm lab.

For each of requeue_hold, update_exclusions and release, the worker is started with the
test-only RECOVERY_FAULT_INJECT hook (tests/fault_worker.py) so that it SIGKILLs itself right
before sending the command (its STARTED milestone committed) or right after the command
returned (before SUCCEEDED is recorded). A second worker without the hook then finishes the
job. Slurm must show each command's effect exactly once (restart count 1, exclusions set,
not held) and the milestones one row per command, SUCCEEDED. Runs on a per-test SQLite file
shared by both processes, and on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
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
from tests.plugins import require
from tests.plugins.database import create_postgres_database, drop_postgres_database
from tests.plugins.slurm_lab import SlurmLab

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
STEPS = ("requeue_hold", "update_exclusions", "release")
JOB = """\
if [ -z "$SLURM_RESTART_COUNT" ]; then sleep 120; exit 0; fi
echo "attempt $SLURM_RESTART_COUNT on $SLURMD_NODENAME"; sleep 2
"""


@pytest.fixture(params=["sqlite", "postgres"])
async def shared_db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AppContext]:
    """A database of its own for this test, which the killed and the restarted worker process share."""
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path}/crash.db"
    else:
        try:
            url = await create_postgres_database()
        except Exception as exc:
            require("PostgreSQL", str(exc))
    engine = create_engine(url)
    await upgrade(engine)
    settings = Settings.build(
        database_url=url, data_dir=str(tmp_path), cluster="crash", environment=f"crash-{uuid.uuid4().hex[:8]}"
    )
    try:
        yield AppContext(settings=settings, engine=engine, sessions=session_factory(engine))
    finally:
        await engine.dispose()
        if request.param == "postgres":
            await drop_postgres_database(url)


def start_worker(ctx: AppContext, lab: SlurmLab, log: Path, *, fault: str | None) -> subprocess.Popen[bytes]:
    """`recovery worker` as a separate process on the shared database, acting, in the test's environment."""
    env = lab.env(
        RECOVERY_DATABASE_URL=ctx.settings.database_url,
        RECOVERY_DATA_DIR=ctx.settings.data_dir,
        RECOVERY_CLUSTER=ctx.settings.cluster,
        RECOVERY_ENVIRONMENT=ctx.settings.environment,
        RECOVERY_ACKNOWLEDGE_SCHEDULER_ACTIONS="true",
        RECOVERY_POLL_INTERVAL="0.3",
        RECOVERY_LEASE_SECONDS="2",
    )
    env.pop("RECOVERY_FAULT_INJECT", None)
    if fault:
        env["RECOVERY_FAULT_INJECT"] = fault
    command = ["-m", "tests.fault_worker"] if fault else ["-m", "app.cli", "worker"]
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, *command], env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)


async def wait_exit(process: subprocess.Popen[bytes], timeout: float, log: Path) -> int:
    deadline = time.monotonic() + timeout
    while process.poll() is None:
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"worker did not die at the fault point; log:\n{log.read_text()[-3000:]}")
        await asyncio.sleep(0.1)
    return process.returncode


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("step", STEPS)
async def test_sigkill_at_a_step_boundary_neither_repeats_nor_loses_a_command(
    shared_db: AppContext, slurm_lab: SlurmLab, step: str, when: str
) -> None:
    ctx = shared_db
    log = slurm_lab.test_dir() / f"worker-{uuid.uuid4().hex[:6]}.log"
    first = start_worker(ctx, slurm_lab, log, fault=f"{when}:{step}")
    second: subprocess.Popen[bytes] | None = None
    try:
        job_id = slurm_lab.submit(batch_script(policy_comment(ctx.settings.environment), JOB, name="crash-safety"))
        a0 = await eventually(lambda: attempt_running(ctx, job_id, 0), what="attempt 0 running")
        bad = a0.nodes[0]
        await add_anomaly(ctx, job_id, kind="CRASH", node=bad, category="xid", key=f"xid-{uuid.uuid4().hex}")
        assert await wait_exit(first, 180, log) == -signal.SIGKILL
        [intent] = [m for m in await milestones(ctx, job_id) if m.step == step]
        assert intent.status == "STARTED"  # the process died between intent and result

        second = start_worker(ctx, slurm_lab, log, fault=None)
        advice = await eventually(
            lambda: advice_done(ctx, job_id, 0), timeout=180, what="Advice converged after the restart"
        )
        await asyncio.sleep(1.5)  # room for a wrongly repeated command to show
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.terminate()
                process.wait(30)
    assert (advice.disposition, advice.disposition_reason) == ("CONVERGED", "DESIRED_STATE_OBSERVED"), log.read_text()[
        -3000:
    ]
    shown = slurm_lab.scontrol_show(job_id)
    assert shown["Restarts"] == "1"  # requeued exactly once
    # released: when it starts again is up to Slurm's scheduler (the shared lab may be busy)
    assert shown["ExcNodeList"] == bad and shown["Priority"] != "0" and "held" not in shown.get("Reason", "").lower()
    rows = await milestones(ctx, job_id)
    assert [(m.step, m.status) for m in rows] == [(s, "SUCCEEDED") for s in STEPS]
    async with ctx.sessions() as session:
        for name in STEPS:
            recorded = await session.scalar(
                select(func.count())
                .select_from(AuditEvent)
                .where(AuditEvent.slurm_job_id == job_id, AuditEvent.event_type == f"scheduler.{name}")
            )
            confirmed = await session.scalar(
                select(func.count())
                .select_from(AuditEvent)
                .where(AuditEvent.event_type == "scheduler.confirmed", AuditEvent.payload["step"].as_string() == name)
            )
            # A command killed after it returned is confirmed from Slurm, never sent again; its own event
            # (e.g. scheduler.requeue_hold) is still in the history, once.
            assert (recorded, confirmed) == ((1, 1) if (name, when) == (step, "after") else (1, 0)), name
