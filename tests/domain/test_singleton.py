"""singleton_dependency: which job is the held twin, and the controller's steps to release it."""

from __future__ import annotations

import datetime as dt

from app.domain.control.planner import AdviceState, DispositionReason, Milestone, StepKind
from app.domain.control.singleton import JobView, choose_twin, plan_twin_step, twin_shadow_plan

NOW = dt.datetime(2026, 12, 1, 12, tzinfo=dt.UTC)
COMMENT = '{"APS":{"workflow_id":"w","auto_resume_mode":"singleton_dependency"}}'


def view(
    job_id: int,
    *,
    state: str = "PENDING",
    held: bool = True,
    dep: str | None = "singleton(unfulfilled)",
    name: str = "train",
    user: str = "alice",
    comment: str = COMMENT,
    excluded: tuple[str, ...] = (),
) -> JobView:
    return JobView(job_id, name, user, state, held, dep, comment, excluded)


FIRST = view(10, state="FAILED", held=False, dep=None)
ADVICE = AdviceState(advice_id=7, generation=1, operation="RESTART", attempt_index=0, exclusions=("node2",))


def test_twin_is_held_pending_same_name_user_comment_with_singleton() -> None:
    jobs = [
        view(11, name="other"),
        view(12, user="bob"),
        view(13, comment="{}"),
        view(14, held=False),
        view(15, dep=None),
        view(16, state="RUNNING"),
        view(18),
        view(17),
        FIRST,
    ]
    twin = choose_twin(FIRST, jobs)
    assert twin is not None and twin.job_id == 17  # the oldest matching twin
    assert choose_twin(FIRST, jobs[:6]) is None


def test_steps_exclude_then_release_then_converge() -> None:
    step = plan_twin_step(ADVICE, FIRST, view(17), twin_id=17, now=NOW)
    assert step.step.kind is StepKind.SET_EXCLUSIONS and step.target == 17 and step.step.exclusions == ("node2",)
    assert step.step.idempotency_key == "7:1:update_exclusions"
    step = plan_twin_step(ADVICE, FIRST, view(17, excluded=("node2",)), twin_id=17, now=NOW)
    assert step.step.kind is StepKind.RELEASE and step.target == 17
    released = [Milestone(1, StepKind.RELEASE, "SUCCEEDED")]
    done = plan_twin_step(
        ADVICE, FIRST, view(17, held=False, excluded=("node2",)), twin_id=17, now=NOW, milestones=released
    )
    assert done.step.kind is StepKind.DONE and done.step.reason is DispositionReason.DESIRED_STATE_OBSERVED


def test_a_hung_first_job_is_cancelled_first() -> None:
    running = view(10, state="RUNNING", held=False, dep=None)
    step = plan_twin_step(ADVICE, running, view(17), twin_id=17, now=NOW)
    assert step.step.kind is StepKind.CANCEL and step.target == 10
    after = plan_twin_step(
        ADVICE, running, view(17), twin_id=17, now=NOW, milestones=[Milestone(1, StepKind.CANCEL, "SUCCEEDED")]
    )
    assert after.step.kind is StepKind.SET_EXCLUSIONS


def test_without_twin_it_waits_then_expires() -> None:
    assert plan_twin_step(ADVICE, FIRST, None, twin_id=None, now=NOW).step.kind is StepKind.WAIT
    expiring = AdviceState(7, 1, "RESTART", 0, expires_at=NOW - dt.timedelta(seconds=1))
    step = plan_twin_step(expiring, FIRST, None, twin_id=None, now=NOW).step
    assert step.kind is StepKind.ABANDON and step.reason is DispositionReason.ADVICE_EXPIRED
    gone = plan_twin_step(ADVICE, FIRST, None, twin_id=17, now=NOW).step
    assert gone.kind is StepKind.ABANDON and gone.reason is DispositionReason.JOB_NOT_FOUND


def test_shadow_plan_lists_every_command_with_its_target() -> None:
    running = view(10, state="RUNNING", held=False, dep=None)
    plan = twin_shadow_plan(ADVICE, running, view(17))
    assert [(s.kind, t) for s, t in plan] == [
        (StepKind.CANCEL, 10),
        (StepKind.SET_EXCLUSIONS, 17),
        (StepKind.RELEASE, 17),
    ]
