"""The Advice write service on both databases: generations, vetoes, milestones and shadow rows."""

import pytest
from sqlalchemy import select

from app.advice import service
from app.advice.models import Advice
from app.domain.admission.mode import ModeDecision
from app.domain.control.planner import Step, StepKind
from app.domain.decision.advice import Decision, Operation
from app.infra.context import AppContext
from app.infra.db import utcnow
from app.jobs.models import Attempt
from app.slurm.fake import FakeScheduler
from tests.advice.helpers import submit
from tests.factories import events
from worker.observer import Observer

MODE = ModeDecision("act", "test")


async def an_attempt(ctx: AppContext) -> Attempt:
    fake = FakeScheduler()
    await submit(Observer(ctx, fake), fake, 51)
    async with ctx.sessions() as session:
        found = await session.scalar(select(Attempt))
        assert found is not None
        return found


def restart(*nodes: str) -> Decision:
    return Decision(Operation.RESTART, "attempt 0 crashed", "restart_allowed", tuple(nodes))


async def test_generation_moves_only_when_the_decision_does(ctx) -> None:
    attempt = await an_attempt(ctx)
    outcomes = []
    for decision in (
        restart("n1"),
        restart("n1"),
        restart("n2"),
        Decision(Operation.NONE, "cancelled", "job_cancelled"),
    ):
        async with ctx.sessions() as session, session.begin():
            outcomes.append(
                (
                    await service.record_decision(session, attempt=attempt, decision=decision, mode=MODE, signal="test")
                ).change
            )
    assert outcomes == ["created", "unchanged", "updated", "unchanged"]
    async with ctx.sessions() as session:
        advice = await session.scalar(select(Advice))
    assert (advice.generation, advice.exclusions) == (2, ["n1", "n2"])


async def test_vetoed_advice_is_kept_as_vetoed(ctx) -> None:
    attempt = await an_attempt(ctx)
    async with ctx.sessions() as session, session.begin():
        outcome = await service.record_decision(session, attempt=attempt, decision=restart(), mode=MODE, signal="test")
        assert outcome.advice is not None
        outcome.advice.review = service.VETOED
        assert outcome.advice is not None
        outcome.advice.active = False
    async with ctx.sessions() as session, session.begin():
        outcome = await service.record_decision(
            session, attempt=attempt, decision=restart("n9"), mode=MODE, signal="test"
        )
    assert outcome.advice is not None
    assert outcome.change == "kept_vetoed" and outcome.advice.exclusions == [] and not outcome.advice.active


async def test_milestones_are_unique_per_key_and_a_succeeded_command_is_never_restarted(ctx) -> None:
    attempt = await an_attempt(ctx)
    async with ctx.sessions() as session, session.begin():
        advice = (
            await service.record_decision(session, attempt=attempt, decision=restart(), mode=MODE, signal="test")
        ).advice
        assert advice is not None
        first = await service.begin_action(
            session, advice=advice, step=StepKind.RELEASE, key="k", command="scontrol release 51"
        )
        await service.finish_action(
            session, action=first, advice=advice, succeeded=False, duration_ms=3.0, detail="timed out"
        )
        again = await service.begin_action(
            session, advice=advice, step=StepKind.RELEASE, key="k", command="scontrol release 51"
        )
        assert again.id == first.id and again.status == "STARTED"
        await service.finish_action(session, action=again, advice=advice, succeeded=True, duration_ms=2.0, detail="ok")
        with pytest.raises(ValueError, match="never sent twice"):
            await service.begin_action(
                session, advice=advice, step=StepKind.RELEASE, key="k", command="scontrol release 51"
            )
    assert [e.payload["status"] for e in await events(ctx, "scheduler.release")] == ["FAILED", "SUCCEEDED"]


async def test_shadow_rows_once_per_generation(ctx) -> None:
    attempt = await an_attempt(ctx)
    steps = [Step(StepKind.REQUEUE_HOLD, "requeue"), Step(StepKind.RELEASE, "release"), Step(StepKind.DONE, "done")]
    added = []
    async with ctx.sessions() as session, session.begin():
        advice = (
            await service.record_decision(session, attempt=attempt, decision=restart(), mode=MODE, signal="test")
        ).advice
        assert advice is not None
        added.append(await service.record_shadow(session, advice=advice, steps=steps, now=utcnow()))
        added.append(await service.record_shadow(session, advice=advice, steps=steps, now=utcnow()))
    assert added == [2, 0]
