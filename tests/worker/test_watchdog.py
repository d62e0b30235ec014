"""The watchdog on both databases: releases only holds our requeue placed, when stale; observe only says so."""

import dataclasses

import pytest
from sqlalchemy import update

from app.advice.models import Advice
from app.infra.context import AppContext
from tests.advice.helpers import SlurmLikeFake, acting, failed_job, submit
from tests.factories import actions, advice_of, events
from worker.controller import Controller
from worker.observer import Observer
from worker.watchdog import Watchdog


@pytest.fixture
def fake() -> SlurmLikeFake:
    return SlurmLikeFake()


async def held_by_our_requeue(ctx: AppContext, fake: SlurmLikeFake, job_id: int) -> Advice:
    """Our controller requeue-held the job and then died before excluding and releasing."""
    advice = await failed_job(ctx, fake, job_id)
    controller = Controller(ctx, fake)
    await controller.reconcile_pass()  # exactly one step: requeue_hold
    assert fake.jobs[job_id].held and fake.count("release") == 0
    await Observer(ctx, fake).tick()
    return advice


async def test_releases_our_hold_once_its_advice_is_inactive(ctx, fake) -> None:
    ctx = acting(ctx, acknowledge_scheduler_actions=True, watchdog_mode="act")
    advice = await held_by_our_requeue(ctx, fake, 41)
    watchdog = Watchdog(ctx, fake)
    await watchdog.tick()
    assert fake.count("release") == 0  # Advice active, hold within the bound
    async with ctx.sessions() as session, session.begin():
        await session.execute(update(Advice).values(review="VETOED", active=False, disposition="ABANDONED"))
    await watchdog.tick()
    assert fake.count("release") == 1 and not fake.jobs[41].held
    [event] = await events(ctx, "watchdog.release")
    assert "no longer active" in event.message and event.component == "watchdog"
    rows = await actions(ctx, advice.id)
    assert [(r.actor, r.step, r.status) for r in rows] == [
        ("controller", "requeue_hold", "SUCCEEDED"),
        ("watchdog", "release", "SUCCEEDED"),
    ]
    await watchdog.tick()
    assert fake.count("release") == 1  # our hold is released: nothing left to do


async def test_releases_a_hold_past_the_bound(ctx, fake) -> None:
    ctx = acting(ctx, acknowledge_scheduler_actions=True, watchdog_mode="act", watchdog_hold_bound=0.0)
    await held_by_our_requeue(ctx, fake, 42)
    await Watchdog(ctx, fake).tick()
    assert fake.count("release") == 1
    [event] = await events(ctx, "watchdog.release")
    assert event.payload["detail"].startswith("held_past_bound")


async def test_never_touches_holds_it_did_not_cause(ctx, fake) -> None:
    ctx = acting(ctx, acknowledge_scheduler_actions=True, watchdog_mode="act", watchdog_hold_bound=0.0)
    observer = Observer(ctx, fake)
    await submit(observer, fake, 43)  # a job with no Advice, held by its user (sbatch --hold / uhold)
    fake.jobs[43] = dataclasses.replace(
        fake.jobs[43], state="PENDING", held=True, state_reason="JobHeldUser", priority=0, nodes=()
    )
    await held_by_our_requeue(ctx, fake, 44)
    # ... and our hold replaced by an admin's `scontrol hold` after we placed it
    fake.jobs[44] = dataclasses.replace(fake.jobs[44], state_reason="JobHeldAdmin", state_description=None)
    fake.calls.clear()
    await Watchdog(ctx, fake).tick()
    assert fake.count("release") == 0
    assert await events(ctx, "watchdog.release") == []


async def test_observe_mode_only_says_what_it_would_do_once(ctx, fake) -> None:
    ctx = acting(ctx, acknowledge_scheduler_actions=True, watchdog_mode="observe", watchdog_hold_bound=0.0)
    advice = await held_by_our_requeue(ctx, fake, 45)
    watchdog = Watchdog(ctx, fake)
    await watchdog.tick()
    await watchdog.tick()
    assert fake.count("release") == 0 and fake.jobs[45].held
    [event] = await events(ctx, "watchdog.would_release")
    assert event.payload["mode"] == "observe"
    assert [(r.actor, r.status) for r in await actions(ctx, advice.id)] == [
        ("controller", "SUCCEEDED"),
        ("watchdog", "SHADOW"),
    ]


async def test_idle_watchdog_does_not_call_slurm(ctx, fake) -> None:
    await Watchdog(ctx, fake).tick()
    assert fake.calls == []
    assert await advice_of(ctx, 1) == []


async def test_releases_an_array_task_by_its_array_and_task_id(ctx, fake) -> None:
    ctx = acting(ctx, acknowledge_scheduler_actions=True, watchdog_mode="act", watchdog_hold_bound=0.0)
    advice = await failed_job(ctx, fake, 90)
    # job 90 is the last task (4) of array 90: the bare "90" would release every task of the array
    fake.jobs[90] = dataclasses.replace(fake.jobs[90], array_job_id=90, array_task_id=4)
    await Controller(ctx, fake).reconcile_pass()  # requeue_hold only, then the controller "dies"
    await Observer(ctx, fake).tick()
    fake.targets.clear()
    await Watchdog(ctx, fake).tick()
    assert fake.targets == [("release", "90_4")]
    assert [r.command for r in await actions(ctx, advice.id)][-1] == "scontrol release 90_4"
