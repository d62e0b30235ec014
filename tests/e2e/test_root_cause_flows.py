"""Root cause on the real Slurm lab: a host-less Xid blames the attempt's only node; a repeated ValueError stops.

The whole path runs as in production: the job prints the line, the collector reads it, the watcher's
evidence layer records the crash with its outlook and blamed nodes, the advisor decides, the controller
carries the Advice out through Slurm.
"""

from pathlib import Path

import pytest
from sqlalchemy import select

from app.evidence.models import Anomaly
from app.infra.context import AppContext
from app.jobs.models import Attempt
from tests.e2e.harness import (
    advice_done,
    advice_list,
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

# The driver's line as dmesg prints it: no host name, so only the allocation can say which node it was.
XID_LINE = "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus."


def _log(directory: Path) -> str:
    return f"{directory}/train-$SLURM_JOB_ID-${{SLURM_RESTART_COUNT:-0}}.log"


async def _crashes(ctx: AppContext, job_id: int) -> list[tuple[int, Anomaly]]:
    async with ctx.sessions() as session:
        rows = (
            await session.execute(
                select(Attempt.attempt_index, Anomaly)
                .join(Attempt, Attempt.id == Anomaly.attempt_id)
                .where(Attempt.slurm_job_id == job_id, Anomaly.kind == "CRASH")
                .order_by(Anomaly.id)
            )
        ).all()
    return [(index, row) for index, row in rows]


async def test_hostless_xid_on_a_single_node_attempt_excludes_that_node(ctx: AppContext, slurm_lab: SlurmLab) -> None:
    env = unique_environment()
    log_dir = slurm_lab.test_dir()
    wctx = lab_context(ctx, env, log_dirs=(str(log_dir),), collector_poll_interval=0.3)
    body = "\n".join(
        [
            'if [ -z "$SLURM_RESTART_COUNT" ]; then',
            "  sleep 2",
            f'  echo "{XID_LINE}" >> "{_log(log_dir)}"',
            "  sleep 120; exit 0",
            "fi",
            'echo "attempt $SLURM_RESTART_COUNT on $SLURMD_NODENAME"',
            "sleep 3",
        ]
    )
    async with running_worker(wctx, slurm_lab):
        job_id = slurm_lab.submit(batch_script(policy_comment(env), body), sbatch_args=["--nodes=1"])
        advice = await eventually(lambda: advice_done(wctx, job_id, 0), what="attempt 0's Advice converged")
        a0 = (await attempts(wctx, job_id))[0]
        node = a0.nodes[0]

        async def second_placed():
            found = await attempts(wctx, job_id)
            return len(found) == 2 and found[1].state in ("RUNNING", "COMPLETED") and found[1].nodes and found[1]

        a1 = await eventually(second_placed, timeout=180, what="attempt 1 placed")
    assert len(a0.nodes) == 1
    assert (advice.operation, advice.exclusions) == ("RESTART", [node])
    assert "XID" in advice.reason and f"excluding {node}" in advice.reason
    assert slurm_lab.scontrol_show(job_id)["ExcNodeList"] == node
    assert node not in a1.nodes
    assert [m.step for m in await milestones(wctx, job_id)] == ["requeue_hold", "update_exclusions", "release"]
    crashes = await _crashes(wctx, job_id)
    assert [(index, row.category, row.xid, row.outlook, row.node) for index, row in crashes] == [
        (0, "XID", 79, "infrastructure", None)
    ]
    # Recorded with the attempt's node list at hand: blamed through the allocation, not through the line.
    assert crashes[0][1].blamed_nodes == [
        {"node": node, "provenance": "allocation", "detail": "the attempt ran on this node only"}
    ]


async def test_same_value_error_at_the_same_step_twice_terminates(ctx: AppContext, slurm_lab: SlurmLab) -> None:
    env = unique_environment()
    log_dir = slurm_lab.test_dir()
    wctx = lab_context(ctx, env, log_dirs=(str(log_dir),), collector_poll_interval=0.3)
    # Every attempt gets to iteration 5 and dies on the same bad batch; it stays up a few seconds so the
    # crash line is read before Slurm reports FAILED.
    body = "\n".join(
        [
            f'LOG="{_log(log_dir)}"',
            'echo " iteration        5/     100 | elapsed time per iteration (ms): 1000.0 | lm loss: 2.3E+00 |" >> "$LOG"',  # noqa: E501 - quoted as printed
            'python3 -c "raise ValueError(\'batch 5 has shape (7, 3), expected (8, 3)\')" >> "$LOG" 2>&1',
            "sleep 6",
            "exit 1",
        ]
    )
    async with running_worker(wctx, slurm_lab):
        job_id = slurm_lab.submit(batch_script(policy_comment(env, max_requeue_times=3), body))
        first = await eventually(lambda: advice_done(wctx, job_id, 0), what="attempt 0's Advice converged")
        second = await eventually(lambda: advice_done(wctx, job_id, 1), timeout=180, what="attempt 1's Advice settled")

        async def second_ended():
            found = await attempts(wctx, job_id)
            return len(found) == 2 and found[1].state in ("CANCELLED", "FAILED") and found

        states = [a.state for a in await eventually(second_ended, what="attempt 1 ended")]
    assert (first.operation, first.rule) == ("RESTART", "restart_allowed")
    assert (second.operation, second.rule) == ("TERMINATE", "application_failure_repeated")
    assert "the same application failure as attempt 0" in second.reason
    assert "ValueError: batch 5 has shape (7, 3), expected (8, 3)" in second.reason
    assert "at iteration 5" in second.reason and "outlook application" in second.reason
    shown = slurm_lab.scontrol_show(job_id)
    # No third attempt. Attempt 1 is usually still up (sleep 6) when its crash line is read, so TERMINATE
    # cancels it; if Slurm reported FAILED first, TERMINATE finds it already ended.
    assert shown["Restarts"] == "1" and shown["JobState"] in ("CANCELLED", "FAILED")
    assert states[0] in ("REQUEUED", "FAILED") and states[1:] == [shown["JobState"]]
    crashes = await _crashes(wctx, job_id)
    assert [(index, row.category, row.outlook, row.blamed_nodes) for index, row in crashes] == [
        (0, "PYTHON_TRACEBACK", "application", []),
        (1, "PYTHON_TRACEBACK", "application", []),
    ]
    assert len(await advice_list(wctx, job_id)) == 2
