"""Fleet-wide trust on the real Slurm lab: a node that fails in three jobs becomes suspect and a fourth job's Advice
excludes it; a storm of failing jobs pauses automatic action until an operator confirms; a drain is verified.

Jobs print the real driver line (a host-less Xid, blamed on the attempt's only node), the collector reads it,
the advisor records the blame and decides, the controller carries Advice out, all against real Slurm.
"""

import subprocess

import pytest
from sqlalchemy import select

from app.advice.models import Advice
from app.audit.models import AuditEvent
from app.fleet import queries as fleet_queries
from app.fleet import service as fleet
from app.fleet.models import ClusterPause
from app.infra.config import Settings
from app.infra.context import AppContext
from app.slurm.cli_scheduler import CliScheduler
from tests.e2e.harness import (
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

# One backend here: the same paths run on SQLite and PostgreSQL against a Slurm-like fake in tests/worker/test_fleet.py.
pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.parametrize("database", ["sqlite"], indirect=True)]

XID_LINE = "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus."


async def _event(ctx: AppContext, event_type: str) -> AuditEvent | None:
    async with ctx.sessions() as session:
        return await session.scalar(select(AuditEvent).where(AuditEvent.event_type == event_type).limit(1))


async def test_a_node_failing_in_three_jobs_is_excluded_by_a_fourth(ctx: AppContext, slurm_lab: SlurmLab) -> None:
    env = unique_environment()
    log_dir = slurm_lab.test_dir()
    # observe mode: Advice is decided and recorded (with its exclusions) but nothing is requeued
    wctx = lab_context(ctx, env, log_dirs=(str(log_dir),), collector_poll_interval=0.3, node_suspect_jobs=3)
    xid_body = f'echo "{XID_LINE}" >> "{log_dir}/train-$SLURM_JOB_ID-${{SLURM_RESTART_COUNT:-0}}.log"; sleep 3; exit 1'
    async with running_worker(wctx, slurm_lab):
        bad = [
            slurm_lab.submit(
                batch_script(policy_comment(env, mode="observe"), xid_body), sbatch_args=["--nodes=1", "-w", "node3"]
            )
            for _ in range(3)
        ]

        async def suspect() -> AuditEvent | None:
            return await _event(wctx, "node.suspect")

        became = await eventually(suspect, timeout=120, what="node3 suspect after three jobs")
        fourth = slurm_lab.submit(
            batch_script(policy_comment(env, mode="observe"), "sleep 1; exit 1"), sbatch_args=["-w", "node1"]
        )

        async def decided() -> Advice | None:
            found = await advice_list(wctx, fourth)
            return found[0] if found else None

        advice = await eventually(decided, timeout=120, what="the fourth job's Advice")
        async with wctx.sessions() as session:
            [(standing, blames)] = await fleet_queries.node_overview(session, cluster=wctx.settings.cluster)
    assert "node node3 is suspect" in became.message
    assert (standing.node, sorted(standing.jobs)) == ("node3", sorted(bad))
    assert sorted({b.slurm_job_id for b in blames}) == sorted(bad)
    assert all(b.category == "XID" and b.outlook == "infrastructure" for b in blames)
    assert (advice.operation, advice.exclusions) == ("RESTART", ["node3"])
    assert "node3: suspect for the cluster" in advice.reason
    assert (await attempts(wctx, fourth))[0].nodes == ["node1"]


async def test_a_storm_of_failing_jobs_pauses_action_until_confirmed(ctx: AppContext, slurm_lab: SlurmLab) -> None:
    env = unique_environment()
    wctx = lab_context(ctx, env, storm_jobs=2)
    # attempt 0 fails at once, attempt 1 (after a restart) succeeds
    body = 'if [ -z "$SLURM_RESTART_COUNT" ]; then sleep 2; exit 1; fi; echo "attempt $SLURM_RESTART_COUNT"; sleep 1'
    async with running_worker(wctx, slurm_lab):
        jobs = [slurm_lab.submit(batch_script(policy_comment(env), body)) for _ in range(3)]

        async def paused() -> list[Advice] | None:
            held = [a for job in jobs for a in await advice_list(wctx, job) if a.disposition_reason == "STORM_PAUSED"]
            return held if len(held) >= 2 else None

        held = await eventually(paused, timeout=120, what="two Advice held by the storm pause")
        held_jobs = {a.slurm_job_id for a in held}
        for job in held_jobs:
            assert not await milestones(wctx, job)  # nothing was sent for a paused Advice
            assert slurm_lab.scontrol_show(job)["Restarts"] == "0"
        async with wctx.sessions() as session, session.begin():
            await fleet.confirm_storm(session, cluster=wctx.settings.cluster, user="op", note="switch replaced")

        async def all_restarted() -> bool:
            found = [a for job in jobs for a in await advice_list(wctx, job)]
            return len(found) == 3 and all(a.disposition == "CONVERGED" for a in found)

        await eventually(all_restarted, timeout=180, what="every Advice carried out after the confirmation")
    async with wctx.sessions() as session:
        pauses = (await session.scalars(select(ClusterPause))).all()
    assert len(pauses) == 1 and pauses[0].confirmed_by == "op"
    storm = await _event(wctx, "storm.detected")
    assert storm is not None and "distinct jobs failed within 5 minutes" in storm.message
    assert {m.step for job in held_jobs for m in await milestones(wctx, job)} == {"requeue_hold", "release"}


async def test_cli_scheduler_drains_a_node_and_sees_it_drained(settings: Settings, slurm_lab: SlurmLab) -> None:
    scheduler = CliScheduler(settings, env=slurm_lab.env())
    try:
        assert not await scheduler.node_drained("node2")
        result = await scheduler.drain_node("node2", "recovery: lab test")
        assert result.command[-2:] == ("State=DRAIN", "Reason=recovery: lab test")
        assert await scheduler.node_drained("node2")
    finally:
        subprocess.run(
            [str(slurm_lab.bin_dir / "scontrol"), "update", "NodeName=node2", "State=RESUME"],
            env=slurm_lab.env(),
            check=True,
        )
    assert not await scheduler.node_drained("node2")
