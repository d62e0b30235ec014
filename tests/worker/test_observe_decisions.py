"""A decision taken in observe mode is never carried out later, on both databases (real observer, advisor and
controller against a Slurm-like fake): a ceiling turned on acts on failures decided after it, and an operator's
"decide again now" makes a new Advice that is carried out."""

import datetime as dt

import pytest
from sqlalchemy import update

from app.advice import review
from app.advice.models import Advice
from app.domain.decision.gate import DECIDED_IN_OBSERVE_TEXT
from app.infra.context import AppContext
from tests.advice.helpers import SlurmLikeFake, acting, failed_job
from tests.factories import actions, add_anomaly, advice_of, events
from worker.advisor import Advisor
from worker.controller import Controller


@pytest.fixture
def fake() -> SlurmLikeFake:
    return SlurmLikeFake()


async def make_due(ctx: AppContext) -> None:
    async with ctx.sessions() as session, session.begin():
        await session.execute(update(Advice).values(next_reconcile_at=None))


def sent(fake: SlurmLikeFake) -> list[str]:
    return [call[0] for call in fake.calls if call[0] not in {"list_jobs", "lookup_job"}]


async def test_an_observe_mode_decision_is_not_carried_out_after_the_ceiling_is_turned_on(ctx, fake) -> None:
    old = await failed_job(ctx, fake, 81)  # the job asks for act; the operator's ceiling is off
    assert old.mode == "observe"
    await Controller(ctx, fake).tick()
    [old] = await advice_of(ctx, 81)
    assert (old.disposition, old.disposition_reason, old.active) == ("PENDING", "NOT_AUTHORIZED", True)
    assert (old.disposition_message or "").startswith(DECIDED_IN_OBSERVE_TEXT)
    shadows = await actions(ctx, old.id)
    assert {r.status for r in shadows} == {"SHADOW"}
    assert all((r.gate or "").startswith("not sent (CEILING_OFF)") for r in shadows)

    on = acting(ctx, acknowledge_scheduler_actions=True)  # minutes later: the ceiling is turned on
    fake.calls.clear()
    await make_due(on)
    controller = Controller(on, fake)
    await controller.tick()
    await make_due(on)
    await controller.tick()
    assert sent(fake) == []
    assert (fake.jobs[81].restart_count, fake.jobs[81].held) == (0, False)
    [old] = await advice_of(on, 81)
    assert (old.disposition, old.disposition_reason, old.active) == ("ABANDONED", "DECIDED_IN_OBSERVE", False)
    assert (old.disposition_message or "").startswith(DECIDED_IN_OBSERVE_TEXT)
    [closed] = await events(on, "reconciliation.abandoned")
    assert "DECIDED_IN_OBSERVE" in closed.message

    # a later signal about the same old failure is not a new decision under the flipped ceiling
    await add_anomaly(on, 81, node="node2", category="xid")
    await Advisor(on).tick()
    [old] = await advice_of(on, 81)
    assert (old.mode, old.active, old.generation) == ("observe", False, 1)

    # a failure decided after the flip is acted on
    new = await failed_job(on, fake, 82)
    assert new.mode == "act"
    await controller.tick()
    assert sent(fake) == ["requeue_hold", "set_excluded_nodes", "release"]
    [new] = await advice_of(on, 82)
    assert new.disposition == "CONVERGED"
    assert all((r.gate or "").startswith("allowed (ALLOWED)") for r in await actions(on, new.id))
    assert fake.jobs[81].restart_count == 0


async def test_decide_again_now_makes_a_new_act_mode_advice_that_is_carried_out(ctx, fake) -> None:
    old = await failed_job(ctx, fake, 83)
    await Controller(ctx, fake).tick()
    async with ctx.sessions() as session, session.begin():
        with pytest.raises(review.ReviewError, match="mode is observe now"):
            await review.decide_again(session, advice_id=old.id, user="otto", settings=ctx.settings)

    on = acting(ctx, acknowledge_scheduler_actions=True)
    async with on.sessions() as session, session.begin():
        new = await review.decide_again(session, advice_id=old.id, user="otto", settings=on.settings)
        new_id = new.id
    old, new = await advice_of(on, 83)
    assert (new.id, new.mode, new.decision_round, new.supersedes_id, new.active) == (new_id, "act", 2, old.id, True)
    assert (new.operation, new.exclusions) == (old.operation, old.exclusions)
    assert (old.superseded_by_id, old.active, old.disposition_reason) == (new.id, False, "DECIDED_IN_OBSERVE")
    assert (old.disposition_message or "").startswith(f"{DECIDED_IN_OBSERVE_TEXT}; decided again now by otto")
    [audit] = await events(on, "advice.decided_again")
    assert audit.actor == "otto" and audit.payload["newAdviceId"] == new.id

    fake.calls.clear()
    await Controller(on, fake).tick()
    assert sent(fake) == ["requeue_hold", "set_excluded_nodes", "release"]
    assert fake.jobs[83].restart_count == 1
    old, new = await advice_of(on, 83)
    assert (new.disposition, old.disposition) == ("CONVERGED", "ABANDONED")
    assert [r.status for r in await actions(on, old.id)] == ["SHADOW"] * 3  # the old one: shadows only

    async with on.sessions() as session, session.begin():
        with pytest.raises(review.ReviewError, match="already decided again"):
            await review.decide_again(session, advice_id=old.id, user="otto", settings=on.settings)
        with pytest.raises(review.ReviewError, match="decided in act mode"):
            await review.decide_again(session, advice_id=new.id, user="otto", settings=on.settings)


async def test_decide_again_refuses_an_old_failure(ctx, fake) -> None:
    old = await failed_job(ctx, fake, 84)
    async with ctx.sessions() as session, session.begin():
        await session.execute(
            update(Advice).where(Advice.id == old.id).values(created_at=old.created_at - dt.timedelta(hours=2))
        )
    on = acting(ctx, acknowledge_scheduler_actions=True)
    async with on.sessions() as session, session.begin():
        with pytest.raises(review.ReviewError, match="only a recent failure is decided again"):
            await review.decide_again(session, advice_id=old.id, user="otto", settings=on.settings)
    [old] = await advice_of(on, 84)
    assert old.superseded_by_id is None and old.active
