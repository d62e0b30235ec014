"""Fleet-wide trust through the real advisor and controller (Slurm-like fake) on both databases: a node blamed in
three jobs is excluded by a fourth, a spent budget holds a restart until released, a storm pauses until confirmed."""

import pytest

from app.fleet import queries as fleet_queries
from app.fleet import service as fleet
from app.infra.context import AppContext
from app.notify.models import Notification
from tests.advice.helpers import SlurmLikeFake, acting, submit
from tests.factories import advice_of, events, rows
from worker.advisor import Advisor
from worker.controller import Controller
from worker.drainer import Drainer
from worker.observer import Observer


@pytest.fixture
def fake() -> SlurmLikeFake:
    return SlurmLikeFake()


async def fail(ctx: AppContext, fake: SlurmLikeFake, job_id: int, *, node: str, state: str = "FAILED", **policy):
    """Attempt 0 of a job ran on one node and ended in `state`; the real observer and advisor see it."""
    observer, advisor = Observer(ctx, fake), Advisor(ctx)
    await advisor.tick()
    await submit(observer, fake, job_id, node=node, **policy)
    fake.finish(job_id, state, exit_code=1)
    await observer.tick()
    await advisor.tick()
    [advice] = await advice_of(ctx, job_id)
    return advice


async def test_a_node_that_failed_in_three_jobs_is_excluded_by_a_fourth_until_cleared(ctx, fake) -> None:
    ctx = acting(ctx, node_suspect_jobs=3)
    for job_id in (41, 42, 43):
        advice = await fail(ctx, fake, job_id, node="node3", state="NODE_FAIL")
        assert advice.exclusions == ["node3"]
    fourth = await fail(ctx, fake, 44, node="node1")  # FAILED, no evidence naming node1
    assert (fourth.operation, fourth.exclusions) == ("RESTART", ["node3"])
    assert "node3: suspect for the cluster" in fourth.reason
    [suspect] = await events(ctx, "node.suspect")
    assert "blamed it in 3 distinct jobs (41, 42, 43)" in suspect.message
    assert [n.event for n in await rows(ctx, Notification) if n.event == "node_suspect"] == ["node_suspect"]
    async with ctx.sessions() as session:
        [(standing, blames)] = await fleet_queries.node_overview(session, cluster="test")
    assert (standing.node, fleet.shown_state(standing, standing.updated_at)) == ("node3", "SUSPECT")
    assert [b.slurm_job_id for b in blames] == [41, 42, 43]
    async with ctx.sessions() as session, session.begin():
        await fleet.set_node(session, cluster="test", node="node3", action="clear", user="op")
    fifth = await fail(ctx, fake, 45, node="node1")
    assert fifth.exclusions == []
    assert len(await events(ctx, "node.cleared")) == 1


async def test_past_the_workflow_budget_a_restart_is_held_until_an_operator_releases_it(ctx, fake) -> None:
    ctx = acting(ctx, acknowledge_scheduler_actions=True, budget_workflow_restarts=1)
    controller = Controller(ctx, fake)
    first = await fail(ctx, fake, 51, node="node1")
    await controller.tick()
    [first] = await advice_of(ctx, 51)
    assert first.disposition == "CONVERGED"
    await fail(ctx, fake, 52, node="node2")
    fake.calls.clear()
    await controller.tick()
    [held] = await advice_of(ctx, 52)
    assert (held.active, held.disposition, held.disposition_reason) == (True, "PENDING", "BUDGET_EXCEEDED")
    assert "workflow wf already had 1 automatic restart(s) in the last 1 hour" in (held.disposition_message or "")
    assert not [c for c in fake.calls if c[0] != "list_jobs"]  # nothing sent for the held restart
    [exceeded] = await events(ctx, "budget.exceeded")
    assert exceeded.slurm_job_id == 52
    assert [n.event for n in await rows(ctx, Notification)].count("budget_exceeded") == 1
    async with ctx.sessions() as session, session.begin():
        await fleet.release_hold(session, advice_id=held.id, user="op", note="checked the job")
    await controller.tick()
    [released] = await advice_of(ctx, 52)
    assert (released.disposition, released.disposition_reason) == ("CONVERGED", "DESIRED_STATE_OBSERVED")
    assert fake.jobs[52].restart_count == 1
    [note] = await events(ctx, "budget.released")
    assert note.actor == "op" and "checked the job" in note.message
    with pytest.raises(fleet.FleetError):
        async with ctx.sessions() as session, session.begin():
            await fleet.release_hold(session, advice_id=held.id, user="op")


async def test_an_extension_lets_held_restarts_of_the_workflow_go_on(ctx, fake) -> None:
    ctx = acting(ctx, acknowledge_scheduler_actions=True, budget_workflow_restarts=1)
    controller = Controller(ctx, fake)
    await fail(ctx, fake, 53, node="node1")
    await controller.tick()
    await fail(ctx, fake, 54, node="node1")
    await controller.tick()
    [held] = await advice_of(ctx, 54)
    assert held.disposition_reason == "BUDGET_EXCEEDED"
    async with ctx.sessions() as session, session.begin():
        await fleet.extend_budget(session, cluster="test", workflow_key="wf", extra=1, user="op", settings=ctx.settings)
    await controller.tick()
    [done] = await advice_of(ctx, 54)
    assert done.disposition == "CONVERGED"
    assert len(await events(ctx, "budget.extended")) == 1


async def test_a_restart_storm_pauses_automatic_action_until_an_operator_confirms(ctx, fake) -> None:
    ctx = acting(ctx, acknowledge_scheduler_actions=True, storm_jobs=3)
    controller = Controller(ctx, fake)
    for job_id in (61, 62, 63):
        await fail(ctx, fake, job_id, node="node1")
    fake.calls.clear()
    await controller.tick()
    held = [a for job_id in (61, 62, 63) for a in await advice_of(ctx, job_id)]
    assert {(a.disposition, a.disposition_reason) for a in held} == {("PENDING", "STORM_PAUSED")}
    assert not [c for c in fake.calls if c[0] != "list_jobs"]
    [storm] = await events(ctx, "storm.detected")
    assert "3 distinct jobs failed within 5 minutes" in storm.message
    assert [n.event for n in await rows(ctx, Notification)].count("restart_storm") == 1
    async with ctx.sessions() as session, session.begin():
        await fleet.confirm_storm(session, cluster="test", user="op")
    await controller.tick()
    done = [a for job_id in (61, 62, 63) for a in await advice_of(ctx, job_id)]
    assert {a.disposition for a in done} == {"CONVERGED"}
    assert len(await events(ctx, "storm.confirmed")) == 1
    assert len(await events(ctx, "storm.detected")) == 1  # the confirmed failures do not count again


async def test_drain_is_observed_first_then_sent_verified_and_bounded_by_the_partition_fraction(ctx, fake) -> None:
    ctx = acting(ctx, node_suspect_jobs=2, node_drain="observe", node_drain_max_fraction=0.34)
    for job_id in (71, 72):
        await fail(ctx, fake, job_id, node="node3", state="NODE_FAIL")
    await Drainer(ctx, fake).tick()
    [would] = await events(ctx, "node.would_drain")
    assert would.message.startswith('scontrol update NodeName=node3 State=DRAIN Reason="recovery: suspect after')
    assert not fake.drained and not [c for c in fake.calls if c[0] == "drain_node"]
    # the operator's ceiling covers drains too (app.domain.decision.gate): RECOVERY_NODE_DRAIN=act alone sends nothing
    await Drainer(acting(ctx, node_drain="act"), fake).tick()
    assert not fake.drained
    act = acting(ctx, node_drain="act", acknowledge_scheduler_actions=True)
    await Drainer(act, fake).tick()
    assert fake.drained == {"node3"}
    async with act.sessions() as session:
        row = await fleet_queries.standing(session, cluster="test", node="node3")
    assert row is not None and (row.drain_status, row.drain_partition) == ("DRAINED", "debug")
    assert len(await events(act, "node.drained")) == 1
    # a second suspect node: draining it too would be 2 of 3 nodes, more than the fraction allows
    for job_id in (73, 74):
        await fail(act, fake, job_id, node="node2", state="NODE_FAIL")
    await Drainer(act, fake).tick()
    await Drainer(act, fake).tick()
    assert fake.drained == {"node3"}
    [refused] = await events(act, "node.drain_refused")
    assert "would make 2 of 3 node(s) drained by Recovery" in refused.message
