"""End to end on the real Slurm lab: a failing job's RESTART and then TERMINATE reach a real webhook receiver once
each, with links to the attempts' pages, and the real Slurm commands show up in the metrics."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from app.infra.context import AppContext
from tests.e2e.harness import advice_done, batch_script, eventually, lab_context, policy_comment, running_worker
from tests.e2e.harness import unique_environment as new_environment
from tests.notify.helpers import Receiver
from tests.plugins.slurm_lab import SlurmLab

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_restart_then_terminate_are_notified_once_with_links(
    ctx: AppContext, slurm_lab: SlurmLab, tmp_path: Path
) -> None:
    receiver = Receiver(tmp_path)
    receiver.flag.unlink()  # a healthy receiver
    env = new_environment()
    wctx = lab_context(
        ctx,
        env,
        notify_urls=(f"[terminate,restart]json://127.0.0.1:{receiver.port}/hook",),
        public_url="https://recovery.example.org",
    )
    requeues = sample("recovery_scheduler_command_seconds_count", command="scontrol requeuehold")
    decisions = sample("recovery_decision_latency_seconds_count", operation="TERMINATE")
    try:
        async with running_worker(wctx, slurm_lab):
            job_id = slurm_lab.submit(batch_script(policy_comment(env, max_requeue_times=1), "sleep 1; exit 1"))
            await eventually(lambda: advice_done(wctx, job_id, 1), timeout=180, what="attempt 1's Advice settled")

            async def two_messages() -> list[dict[str, Any]] | None:
                mine = [m for m in receiver.messages() if f"job {job_id} " in m["title"]]
                return mine if len(mine) >= 2 else None

            messages = await eventually(two_messages, timeout=60, what="both notifications")
    finally:
        receiver.stop()
    keys = [re.search(r"Key: (\S+)", m["message"]).group(1) for m in messages]  # type: ignore[union-attr]
    assert [k.split(":")[0] for k in keys] == ["restart", "terminate"] and len(set(keys)) == 2
    restart, terminate = messages
    assert f"job {job_id} attempt 0" in restart["title"] and "will be restarted" in restart["title"]
    assert f"https://recovery.example.org/dashboard/jobs/{job_id}/attempts/0" in restart["message"]
    assert f"job {job_id} attempt 1" in terminate["title"] and "stopped for good" in terminate["title"]
    assert "What happened: " in terminate["message"] and "retry limit 1 reached" in terminate["message"]
    assert "Decided: TERMINATE" in terminate["message"]
    assert f"https://recovery.example.org/dashboard/jobs/{job_id}/attempts/1" in terminate["message"]
    # The real commands and decisions were measured.
    assert sample("recovery_scheduler_command_seconds_count", command="scontrol requeuehold") >= requeues + 1
    assert sample("recovery_decision_latency_seconds_count", operation="TERMINATE") >= decisions + 1
    assert sample("recovery_observer_tick_seconds_count") > 0
