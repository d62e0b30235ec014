"""The recovery path through slurmrestd (JWT): crash -> requeue-hold -> exclusions -> release -> CONVERGED, on the
22.05 twin and (`slurm_versions`) the 24.11 and 26.05 labs' own slurmrestd."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

import pytest

from app.infra.context import AppContext
from app.slurm.cli_scheduler import CliScheduler
from app.slurm.rest_scheduler import RestScheduler
from tests.e2e.harness import (
    ARRAY_BODY,
    advice_done,
    array_tasks,
    attempt_running,
    attempts,
    batch_script,
    eventually,
    lab_context,
    milestones,
    policy_comment,
    unique_environment,
    watching,
)
from tests.factories import add_anomaly
from tests.plugins.slurmrestd import RestLab
from worker.registry import build_services
from worker.runner import WorkerRunner

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

LONG_FIRST_ATTEMPT = """\
if [ -z "$SLURM_RESTART_COUNT" ]; then echo "attempt 0 on $SLURMD_NODENAME"; sleep 120; exit 0; fi
echo "attempt $SLURM_RESTART_COUNT on $SLURMD_NODENAME"
"""


@contextlib.asynccontextmanager
async def rest_worker(ctx: AppContext, restlab: RestLab) -> AsyncIterator[RestScheduler]:
    """The real services with the slurmrestd adapter (its scontrol fallback pointed at the same cluster)."""
    rest = RestScheduler(ctx.settings, fallback=CliScheduler(ctx.settings, env=restlab.slurm.env()))
    runner = WorkerRunner(ctx, build_services(ctx, scheduler=rest))
    task = asyncio.create_task(runner.run())
    try:
        await watching(runner)  # jobs that end before the observer's first complete look are adopted, not decided
        yield rest
    finally:
        runner.stop()
        await asyncio.wait_for(task, 30)
        await rest.aclose()


@pytest.mark.slurm_versions
async def test_crash_is_recovered_through_slurmrestd(ctx: AppContext, rest_lab: RestLab) -> None:
    env = unique_environment()
    wctx = lab_context(
        ctx,
        env,
        cluster=rest_lab.cluster,
        slurm_api="rest",
        slurmrestd_url=rest_lab.url,
        slurmrestd_jwt_key=rest_lab.jwt_key,
        slurmrestd_user=rest_lab.user,
    )
    lab = rest_lab.slurm
    async with rest_worker(wctx, rest_lab) as rest:
        job_id = lab.submit(
            batch_script(policy_comment(env), LONG_FIRST_ATTEMPT, name="e2e-rest"), sbatch_args=rest_lab.as_user
        )
        a0 = await eventually(lambda: attempt_running(wctx, job_id, 0), what="attempt 0 running (seen over REST)")
        bad = a0.nodes[0]
        await add_anomaly(wctx, job_id, kind="CRASH", node=bad, category="xid", key=f"xid-{uuid.uuid4().hex}")
        advice = await eventually(lambda: advice_done(wctx, job_id, 0), what="Advice converged")

        async def second_ran():
            found = await attempts(wctx, job_id)
            return len(found) == 2 and found[1].state in {"RUNNING", "COMPLETED"} and found[1].nodes and found

        _, a1 = await eventually(second_ran, timeout=180, what="attempt 1 ran")
    version = rest_lab.api_version
    assert rest.version == version and rest.tokens is not None
    assert (advice.operation, advice.disposition, advice.disposition_reason) == (
        "RESTART",
        "CONVERGED",
        "DESIRED_STATE_OBSERVED",
    )
    assert advice.exclusions == [bad] and bad not in a1.nodes
    assert [(m.step, m.status) for m in await milestones(wctx, job_id)] == [
        ("requeue_hold", "SUCCEEDED"),
        ("update_exclusions", "SUCCEEDED"),
        ("release", "SUCCEEDED"),
    ]
    details = {m.step: m.detail or "" for m in await milestones(wctx, job_id)}
    assert f"slurmrestd: POST {rest_lab.url}/slurm/{version}/job/{job_id}" in details["release"]
    # 22.05 has no REST form of excluded nodes, and only v0.0.45 (26.05) one of requeue: scontrol (the fallback)
    assert ("slurmrestd: POST" in details["update_exclusions"]) == (rest_lab.release != "22.05")
    assert ("slurmrestd: GET" in details["requeue_hold"]) == (rest_lab.release == "26.05")
    shown = lab.scontrol_show(job_id)
    assert shown["Restarts"] == "1" and shown["ExcNodeList"] == bad


async def test_crashed_master_id_array_task_is_recovered_alone_through_slurmrestd(
    ctx: AppContext, slurmrestd: RestLab
) -> None:
    env = unique_environment()
    wctx = lab_context(
        ctx,
        env,
        cluster=slurmrestd.cluster,
        slurm_api="rest",
        slurmrestd_url=slurmrestd.url,
        slurmrestd_jwt_key=slurmrestd.jwt_key,
        slurmrestd_user=slurmrestd.user,
    )
    lab = slurmrestd.slurm
    async with rest_worker(wctx, slurmrestd):
        array_id = lab.submit(
            batch_script(policy_comment(env), ARRAY_BODY, name="e2e-rest-array"),
            sbatch_args=[*slurmrestd.as_user, "--array=1-3"],
            CRASH_TASK="3",
            SIBLING_SECONDS="90",
        )

        async def split() -> dict[int, dict[str, str]] | None:
            tasks = array_tasks(lab, array_id)
            return tasks if set(tasks) == {1, 2, 3} else None

        await eventually(split, timeout=180, what="the three tasks split into their own records")
        advice = await eventually(lambda: advice_done(wctx, array_id, 0), what="the master-id task's Advice converged")
        after = array_tasks(lab, array_id)
    assert advice.disposition == "CONVERGED" and after[3]["JobId"] == str(array_id) and after[3]["Restarts"] == "1"
    assert [after[task]["Restarts"] for task in (1, 2)] == ["0", "0"]
    assert [m.command for m in await milestones(wctx, array_id)] == [
        f"scontrol requeuehold {array_id}_3",
        f"scontrol release {array_id}_3",
    ]
