"""The controller on both databases against a Slurm-like fake: steps, milestones, observe mode, backoff, not-found."""

import dataclasses
import datetime as dt

import pytest
from sqlalchemy import update

from app.advice.models import Advice, SchedulerAction
from app.infra.context import AppContext
from app.slurm.errors import TransientSchedulerError
from app.slurm.fake import make_job
from tests.advice.helpers import SlurmLikeFake, acting, comment, failed_job, submit
from tests.factories import actions, add_anomaly, advice_of, events
from worker.advisor import Advisor
from worker.controller import Controller
from worker.observer import Observer


@pytest.fixture
def fake() -> SlurmLikeFake:
    return SlurmLikeFake()


@pytest.fixture
def act_ctx(ctx: AppContext) -> AppContext:
    return acting(ctx, acknowledge_scheduler_actions=True)


async def make_due(ctx: AppContext) -> None:
    async with ctx.sessions() as session, session.begin():
        await session.execute(update(Advice).values(next_reconcile_at=None))


async def test_restart_requeues_held_excludes_releases_and_converges(act_ctx, fake) -> None:
    advice = await failed_job(act_ctx, fake, 31)
    controller = Controller(act_ctx, fake)
    fake.calls.clear()
    await controller.tick()
    commands = [call[0] for call in fake.calls if call[0] != "list_jobs"]
    assert commands == ["requeue_hold", "set_excluded_nodes", "release"]
    # one bulk observation per pass, each step planned from a fresh one
    assert fake.count("list_jobs") == controller.passes == 4
    job = fake.jobs[31]
    assert (job.restart_count, job.held, job.excluded_nodes) == (1, False, ("node1",))
    [advice] = await advice_of(act_ctx, 31)
    assert (advice.disposition, advice.disposition_reason, advice.observed_generation, advice.active) == (
        "CONVERGED",
        "DESIRED_STATE_OBSERVED",
        1,
        False,
    )
    rows = await actions(act_ctx, advice.id)
    assert [(r.step, r.status, r.idempotency_key) for r in rows] == [
        ("requeue_hold", "SUCCEEDED", f"{advice.id}:1:requeue_hold"),
        ("update_exclusions", "SUCCEEDED", f"{advice.id}:1:update_exclusions"),
        ("release", "SUCCEEDED", f"{advice.id}:1:release"),
    ]
    assert all(
        r.duration_ms is not None
        and r.finished_at is not None
        and r.started_at is not None
        and r.finished_at >= r.started_at
        for r in rows
    )
    for event_type in (
        "scheduler.requeue_hold",
        "scheduler.update_exclusions",
        "scheduler.release",
        "reconciliation.converged",
    ):
        [event] = await events(act_ctx, event_type)
    assert "durationMs" in (await events(act_ctx, "scheduler.release"))[0].payload
    fake.calls.clear()
    await controller.tick()
    assert fake.calls == []  # converged Advice is not active: no Slurm call at all


async def test_observe_mode_records_shadow_actions_once_and_touches_nothing(ctx, fake) -> None:
    advice = await failed_job(ctx, fake, 32)
    assert advice.mode == "observe"
    controller = Controller(ctx, fake)
    fake.calls.clear()
    await controller.tick()
    await make_due(ctx)
    await controller.tick()
    assert {call[0] for call in fake.calls} == {"list_jobs"}
    rows = await actions(ctx, advice.id)
    assert [(r.step, r.status) for r in rows] == [
        ("requeue_hold", "SHADOW"),
        ("update_exclusions", "SHADOW"),
        ("release", "SHADOW"),
    ]
    [advice] = await advice_of(ctx, 32)
    assert (advice.disposition, advice.disposition_reason, advice.active) == ("PENDING", "NOT_AUTHORIZED", True)
    assert "would run: scontrol requeuehold 32" in (advice.disposition_message or "")
    assert len(await events(ctx, "reconciliation.shadow")) == 1
    assert fake.jobs[32].restart_count == 0


async def test_transient_failure_backs_off_and_retries_the_same_milestone(act_ctx, fake) -> None:
    advice = await failed_job(act_ctx, fake, 33, node=None)
    controller = Controller(act_ctx, fake)
    fake.fail_next("requeue_hold", TransientSchedulerError("socket timed out", command=("scontrol",), returncode=1))
    await controller.tick()
    [advice] = await advice_of(act_ctx, 33)
    assert advice.active and advice.reconcile_failures == 1
    assert advice.next_reconcile_at is not None and advice.next_reconcile_at > dt.datetime.now(dt.UTC)
    [row] = await actions(act_ctx, advice.id)
    assert (row.step, row.status) == ("requeue_hold", "FAILED")
    await controller.tick()
    assert fake.count("requeue_hold") == 1  # still backing off
    await make_due(act_ctx)
    await controller.tick()
    [advice] = await advice_of(act_ctx, 33)
    assert advice.disposition == "CONVERGED" and advice.reconcile_failures == 0
    rows = await actions(act_ctx, advice.id)
    assert [(r.step, r.status) for r in rows] == [("requeue_hold", "SUCCEEDED"), ("release", "SUCCEEDED")]
    assert fake.jobs[33].restart_count == 1


async def test_could_not_observe_is_never_gone(act_ctx, fake) -> None:
    await failed_job(act_ctx, fake, 34)
    controller = Controller(act_ctx, fake)
    fake.fail_next("list_jobs", TransientSchedulerError("unable to contact slurm controller"))
    await controller.tick()
    [advice] = await advice_of(act_ctx, 34)
    assert advice.active and advice.disposition == "PENDING" and advice.reconcile_failures == 1
    fake.remove(34)  # slurmctld forgot it; the lookup fails too
    fake.fail_next("lookup_job", TransientSchedulerError("socket timed out"))
    await make_due(act_ctx)
    await controller.tick()
    [advice] = await advice_of(act_ctx, 34)
    assert advice.active and advice.reconcile_failures == 2
    await make_due(act_ctx)
    await controller.tick()  # now the lookup answers: accounting has it, slurmctld does not
    [advice] = await advice_of(act_ctx, 34)
    assert (advice.disposition, advice.disposition_reason) == ("ABANDONED", "JOB_NOT_FOUND")
    assert "accounting has" in (advice.disposition_message or "")
    assert fake.count("requeue_hold") == 0


async def test_terminate_cancels_a_running_attempt_and_leaves_an_ended_one(act_ctx, fake) -> None:
    observer, advisor = Observer(act_ctx, fake), Advisor(act_ctx)
    await advisor.tick()
    await submit(observer, fake, 35, requeue=False)
    await add_anomaly(act_ctx, 35, kind="NO_PROGRESS", category="no_output")
    await advisor.tick()
    [advice] = await advice_of(act_ctx, 35)
    assert (advice.operation, advice.rule) == ("TERMINATE", "requeue_not_possible")
    await Controller(act_ctx, fake).tick()
    assert fake.jobs[35].state == "CANCELLED"
    [advice] = await advice_of(act_ctx, 35)
    assert (advice.disposition, advice.disposition_reason) == ("CONVERGED", "DESIRED_STATE_OBSERVED")
    assert len(await events(act_ctx, "scheduler.cancel")) == 1


async def test_vetoed_or_fenced_advice_is_never_acted_on(act_ctx, fake) -> None:
    advice = await failed_job(act_ctx, fake, 36)
    controller = Controller(act_ctx, fake)

    async def lost() -> bool:
        return False

    controller.fence = lost
    await controller.tick()
    assert fake.count("requeue_hold") == 0 and await actions(act_ctx, advice.id) == []
    controller.fence = None
    async with act_ctx.sessions() as session, session.begin():
        await session.execute(
            update(Advice).values(review="VETOED", active=False, disposition="ABANDONED", disposition_reason="VETOED")
        )
    await controller.tick()
    assert fake.count("requeue_hold") == 0


async def test_an_interrupted_requeue_hold_is_confirmed_not_repeated(act_ctx, fake) -> None:
    advice = await failed_job(act_ctx, fake, 37)
    # A controller wrote its intent, sent the command, and died before recording the result.
    async with act_ctx.sessions() as session, session.begin():
        session.add(
            SchedulerAction(
                advice_id=advice.id,
                generation=1,
                step="requeue_hold",
                idempotency_key=f"{advice.id}:1:requeue_hold",
                status="STARTED",
                command="scontrol requeuehold 37",
            )
        )
    await fake.requeue_hold(37)
    fake.calls.clear()
    await Controller(act_ctx, fake).tick()
    assert [call[0] for call in fake.calls if call[0] != "list_jobs"] == ["set_excluded_nodes", "release"]
    rows = await actions(act_ctx, advice.id)
    assert [(r.step, r.status) for r in rows] == [
        ("requeue_hold", "SUCCEEDED"),
        ("update_exclusions", "SUCCEEDED"),
        ("release", "SUCCEEDED"),
    ]
    assert "before recording the result" in (rows[0].detail or "")
    assert fake.jobs[37].restart_count == 1 and len(await events(act_ctx, "scheduler.confirmed")) == 1


async def test_hold_the_controller_did_not_place_is_never_released(act_ctx, fake) -> None:
    await failed_job(act_ctx, fake, 38)
    await fake.requeue_hold(38)  # a person's requeuehold: no intent of ours
    fake.calls.clear()
    await Controller(act_ctx, fake).tick()
    assert fake.count("release") == 0 and fake.jobs[38].held
    [advice] = await advice_of(act_ctx, 38)
    assert advice.exclusions == ["node1"] and fake.jobs[38].excluded_nodes == ("node1",)  # exclusions still set
    assert advice.disposition == "PENDING" and "never release" in (advice.disposition_message or "")


async def test_array_task_is_named_by_array_and_task_id_in_every_command(act_ctx, fake) -> None:
    # task 4 is the array's last task and keeps the array's id 70: the bare "70" would name all tasks
    fake.add(make_job(71, comment=comment(), array_job_id=70, array_task_id=1))
    fake.start(71, ["node2"])
    observer = Observer(act_ctx, fake)
    await Advisor(act_ctx).tick()
    fake.add(make_job(70, comment=comment(), array_job_id=70, array_task_id=4))
    fake.start(70, ["node1"])
    await observer.tick()
    await add_anomaly(act_ctx, 70, node="node1", category="xid")
    fake.finish(70, "FAILED", exit_code=1)
    await observer.tick()
    await Advisor(act_ctx).tick()
    await Controller(act_ctx, fake).tick()
    assert fake.targets == [("requeue_hold", "70_4"), ("set_excluded_nodes", "70_4"), ("release", "70_4")]
    [advice] = await advice_of(act_ctx, 70)
    assert advice.disposition == "CONVERGED"
    assert [r.command for r in await actions(act_ctx, advice.id)] == [
        "scontrol requeuehold 70_4",
        "scontrol update JobId=70_4 ExcNodeList=node1",
        "scontrol release 70_4",
    ]
    assert fake.jobs[71].restart_count == 0 and fake.jobs[71].state == "RUNNING"


async def test_array_record_of_several_pending_tasks_is_never_acted_on(act_ctx, fake) -> None:
    advice = await failed_job(act_ctx, fake, 80)
    # Slurm lists the id as the array's record of still-pending tasks: no command can name one task
    fake.jobs[80] = dataclasses.replace(fake.jobs[80], array_job_id=80, array_task_id=None, array_task_string="2-5")
    await Controller(act_ctx, fake).tick()
    assert fake.targets == []
    [advice] = await advice_of(act_ctx, 80)
    assert advice.active and "several pending tasks" in (advice.disposition_message or "")


async def test_a_failed_checkpoint_check_holds_the_release_only_where_the_operator_chose(act_ctx, fake) -> None:
    advice = await failed_job(act_ctx, fake, 61)
    async with act_ctx.sessions() as session, session.begin():
        await session.execute(
            update(Advice)
            .where(Advice.id == advice.id)
            .values(checkpoint_check={"status": "MISSING", "message": "no loadable checkpoint: /ckpt does not exist"})
        )
    blocking = dataclasses.replace(act_ctx.settings, checkpoint_check_block_partitions=("*",))
    controller = Controller(AppContext(settings=blocking, engine=act_ctx.engine, sessions=act_ctx.sessions), fake)
    await controller.tick()
    job = fake.jobs[61]
    assert (job.restart_count, job.held) == (1, True)  # requeued held with its exclusions, not released
    [advice] = await advice_of(act_ctx, 61)
    assert advice.disposition == "PENDING" and "release held back: no loadable checkpoint" in (
        advice.disposition_message or ""
    )
    await make_due(act_ctx)
    await Controller(act_ctx, fake).tick()  # without the blocking setting release is never held back
    assert fake.jobs[61].held is False
    [advice] = await advice_of(act_ctx, 61)
    assert advice.disposition == "CONVERGED"


async def test_singleton_twin_chain_shares_the_retry_limit(act_ctx, fake) -> None:
    policy = comment(auto_resume_mode="singleton_dependency", max_requeue_times=1)
    twin_fields = dict(comment=policy, name="train", held=True, priority=0, dependency="singleton(unfulfilled)")
    observer, advisor = Observer(act_ctx, fake), Advisor(act_ctx)
    await advisor.tick()
    fake.add(make_job(71, comment=policy, name="train"))
    fake.add(make_job(72, state_reason="JobHeldUser", **twin_fields))
    fake.add(make_job(73, state_reason="JobHeldUser", **twin_fields))
    fake.start(71, ["node1"])
    await observer.tick()
    await add_anomaly(act_ctx, 71, node="node1", category="xid")
    fake.finish(71, "FAILED", exit_code=1)
    await observer.tick()
    await advisor.tick()
    await Controller(act_ctx, fake).tick()
    [first] = await advice_of(act_ctx, 71)
    assert (first.rule, first.successor_job_id, first.disposition) == ("release_singleton_twin", 72, "CONVERGED")
    assert (fake.jobs[72].held, fake.jobs[72].excluded_nodes, fake.jobs[73].held) == (False, ("node1",), True)
    fake.start(72, ["node2"])
    await observer.tick()
    fake.finish(72, "FAILED", exit_code=1)
    await observer.tick()
    await advisor.tick()
    [second] = await advice_of(act_ctx, 72)
    # the twin's failure is retry 2 of the one run: past max_requeue_times 1, so no further twin is released
    assert (second.operation, second.rule) == ("TERMINATE", "retry_limit") and "retry limit 1 reached" in second.reason
    await Controller(act_ctx, fake).tick()
    assert fake.jobs[73].held is True


async def test_the_step_hook_runs_around_each_command_and_the_service_has_none(act_ctx, fake, monkeypatch) -> None:
    """The point tests/fault_worker.py kills or pauses the worker at: after STARTED is committed, before SUCCEEDED."""
    assert Controller.step_hook is None
    await failed_job(act_ctx, fake, 32)
    seen: list[tuple[str, str, list[str]]] = []

    def hook(when: str, step) -> None:
        seen.append((when, step.value, [call[0] for call in fake.calls if call[0] != "list_jobs"]))

    monkeypatch.setattr(Controller, "step_hook", staticmethod(hook))
    fake.calls.clear()
    await Controller(act_ctx, fake).tick()
    assert seen == [
        ("before", "requeue_hold", []),
        ("after", "requeue_hold", ["requeue_hold"]),
        ("before", "update_exclusions", ["requeue_hold"]),
        ("after", "update_exclusions", ["requeue_hold", "set_excluded_nodes"]),
        ("before", "release", ["requeue_hold", "set_excluded_nodes"]),
        ("after", "release", ["requeue_hold", "set_excluded_nodes", "release"]),
    ]
