"""The watchdog can run apart from the worker, under a lease of its own, so a dead worker still fails open."""

import asyncio
import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sqlalchemy import select

from app.infra.context import AppContext
from app.leases.models import WorkerLease
from app.slurm.fake import FakeScheduler
from worker.registry import build_services, build_watchdog
from worker.runner import WorkerRunner
from worker.service import Service
from worker.watchdog import Watchdog

ROOT = Path(__file__).resolve().parents[2]


async def test_separate_watchdog_leaves_the_worker(ctx: AppContext) -> None:
    separate = AppContext(dataclasses.replace(ctx.settings, watchdog_process="separate"), ctx.engine, ctx.sessions)
    assert any(isinstance(s, Watchdog) for s in build_services(ctx, scheduler=FakeScheduler()))
    assert not any(isinstance(s, Watchdog) for s in build_services(separate, scheduler=FakeScheduler()))
    assert [type(s) for s in build_watchdog(separate, scheduler=FakeScheduler())] == [Watchdog]


class _Idle(Service):
    name = "idle"

    async def tick(self) -> None:
        return None


async def test_worker_and_watchdog_hold_their_own_leases_at_once(ctx: AppContext) -> None:
    settings = dataclasses.replace(ctx.settings, lease_seconds=1.0)
    context = AppContext(settings, ctx.engine, ctx.sessions)
    worker, watchdog = WorkerRunner(context, [_Idle()]), WorkerRunner(context, [_Idle()], role="watchdog")
    tasks = [asyncio.create_task(worker.run()), asyncio.create_task(watchdog.run())]
    try:
        deadline = time.monotonic() + 10
        while not (worker.has_lease and watchdog.has_lease):
            assert time.monotonic() < deadline, "both leases were not acquired"
            await asyncio.sleep(0.05)
        assert (worker.lease, watchdog.lease) == ("worker:test", "watchdog:test")
    finally:
        worker.stop()
        watchdog.stop()
        await asyncio.gather(*tasks)


def test_recovery_watchdog_command_runs_under_its_lease(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "RECOVERY_DATA_DIR": str(tmp_path),
        "RECOVERY_CLUSTER": "wd",
        "RECOVERY_WATCHDOG_PROCESS": "separate",
    }
    assert (
        subprocess.run(
            [sys.executable, "-m", "app.cli", "db", "upgrade"], cwd=ROOT, env=env, capture_output=True, timeout=60
        ).returncode
        == 0
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "watchdog"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        from app.infra.config import Settings

        async def holder() -> str | None:
            context = AppContext.open(Settings.build(data_dir=str(tmp_path)))
            try:
                async with context.sessions() as session:
                    lease = await session.scalar(select(WorkerLease).where(WorkerLease.name == "watchdog:wd"))
                    return lease.holder if lease else None
            finally:
                await context.close()

        deadline = time.monotonic() + 30
        while asyncio.run(holder()) is None:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, "the watchdog took no lease"
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=30)[0]
    assert proc.returncode == 0, output
    assert "watchdog for cluster 'wd' running" in output
