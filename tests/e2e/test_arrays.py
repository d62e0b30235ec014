"""Job arrays on the real Slurm lab: a crashed task is recovered alone, its siblings are never touched.

The hazard these tests guard against (seen on 22.05): the last task of an array keeps the array's
own job id, and `scontrol requeuehold <that id>` requeues EVERY task of the array. The controller
therefore names an array task `<array id>_<task id>` in every command.
"""

import pytest
from sqlalchemy import select

from app.audit.models import AuditEvent
from app.infra.context import AppContext
from app.jobs import queries as job_queries
from app.jobs.models import Attempt, Job
from tests.e2e.harness import (
    ARRAY_BODY,
    advice_done,
    array_tasks,
    attempts,
    batch_script,
    eventually,
    lab_context,
    milestones,
    policy_comment,
    running_worker,
    unique_environment,
)
from tests.plugins.slurm_lab import SlurmLab

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


@pytest.mark.parametrize("crash_task", [4, 3], ids=["master-id-task", "middle-task"])
async def test_crashed_array_task_is_requeued_alone(ctx: AppContext, slurm_lab: SlurmLab, crash_task: int) -> None:
    env = unique_environment()
    wctx = lab_context(ctx, env)
    async with running_worker(wctx, slurm_lab):
        array_id = slurm_lab.submit(
            batch_script(policy_comment(env), ARRAY_BODY, name="e2e-array"),
            sbatch_args=["--array=1-4"],
            CRASH_TASK=str(crash_task),
            SIBLING_SECONDS="90",
        )

        async def split() -> dict[int, dict[str, str]] | None:
            tasks = array_tasks(slurm_lab, array_id)
            return tasks if set(tasks) == {1, 2, 3, 4} else None

        # the crashing task is one record of its own once it has started (before, it may be the pending remainder)
        tasks = await eventually(split, timeout=180, what="all four tasks split into their own records")
        crashed_id = int(tasks[crash_task]["JobId"])
        if crash_task == 4:
            assert crashed_id == array_id  # the last task keeps the array's id: the hazardous case
        else:
            assert crashed_id != array_id
        advice = await eventually(
            lambda: advice_done(wctx, crashed_id, 0), timeout=180, what="the crashed task's Advice converged"
        )

        async def retried() -> list[Attempt] | None:
            found = await attempts(wctx, crashed_id)
            return found if len(found) == 2 and found[1].state in {"RUNNING", "COMPLETED"} else None

        a0, a1 = await eventually(retried, timeout=180, what="the crashed task's attempt 1 ran")
        after = array_tasks(slurm_lab, array_id)
        async with wctx.sessions() as session:
            recorded = await job_queries.find_job(session, slurm_job_id=crashed_id)
    assert (advice.operation, advice.disposition) == ("RESTART", "CONVERGED")
    assert (a0.state, a0.exit_code) == ("FAILED", 1)
    assert after[crash_task]["Restarts"] == "1"
    for task in {1, 2, 3, 4} - {crash_task}:
        sibling = after[task]
        assert sibling["Restarts"] == "0", f"task {task} was touched: {sibling}"
        assert sibling["JobState"] in {"RUNNING", "COMPLETED", "PENDING"}, f"task {task}: {sibling['JobState']}"
        assert "held" not in sibling.get("Reason", "").lower(), f"task {task} is held: {sibling['Reason']}"
        assert await attempts(wctx, int(sibling["JobId"])) and len(await attempts(wctx, int(sibling["JobId"]))) == 1
    commands = [m.command for m in await milestones(wctx, crashed_id)]
    assert commands == [f"scontrol requeuehold {array_id}_{crash_task}", f"scontrol release {array_id}_{crash_task}"]
    assert recorded is not None and (recorded.array_job_id, recorded.array_task_id) == (array_id, crash_task)


async def test_heterogeneous_job_is_refused_with_an_audit_event(ctx: AppContext, slurm_lab: SlurmLab) -> None:
    env = unique_environment()
    wctx = lab_context(ctx, env)
    # `#SBATCH hetjob` splits the directives into two components (leader +0 and +1), one allocation
    body = "#SBATCH hetjob\n#SBATCH -n1\nsleep 1; exit 1\n"
    async with running_worker(wctx, slurm_lab):
        leader = slurm_lab.submit(batch_script(policy_comment(env), body, name="e2e-het"))

        async def refused() -> list[Job] | None:
            async with wctx.sessions() as session:
                found = [await job_queries.find_job(session, slurm_job_id=leader + offset) for offset in (0, 1)]
            rows = [row for row in found if row is not None]
            return rows if len(rows) == 2 else None

        rows = await eventually(refused, timeout=180, what="both components registered")
        events = await audit_events(wctx, "job.refused")
    assert [r.enrolment for r in rows] == ["HETEROGENEOUS_JOB", "HETEROGENEOUS_JOB"]
    assert f"heterogeneous job {leader}+1" in (rows[1].enrolment_reason or "")
    assert {e.slurm_job_id for e in events} == {leader, leader + 1}
    assert await attempts(wctx, leader) == [] and await milestones(wctx, leader) == []
    assert slurm_lab.scontrol_show(leader)["Restarts"] == "0"


async def audit_events(ctx: AppContext, event_type: str) -> list[AuditEvent]:
    async with ctx.sessions() as session:
        return list((await session.scalars(select(AuditEvent).where(AuditEvent.event_type == event_type))).all())
