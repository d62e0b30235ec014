"""The watchdog releases only our own stale requeue-holds, never a hold someone else placed."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.control.planner import JobObservation, Milestone, StepKind
from app.domain.control.watchdog import (
    ADVICE_INACTIVE,
    HELD_PAST_BOUND,
    AdviceHoldState,
    HeldJob,
    advice_hold_state,
    jobs_to_release,
    judge_hold,
)

NOW = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
BOUND = 900.0


def held(
    reason: str = "JobHeldUser", description: str | None = "job requeued in held state", rc: int = 1, priority: int = 0
) -> JobObservation:
    return JobObservation(
        state="PENDING",
        restart_count=rc,
        held=priority == 0,
        state_reason=reason,
        state_description=description,
        priority=priority,
    )


OURS = held()
ADMIN = held("JobHeldAdmin", None)
USER = held("JobHeldUser", None)
MAXRQ = held("JobHoldMaxRequeue", None)
UNHELD = held("BeginTime", None, priority=100)


def advice(active: bool = True, caused: bool = True, k: int = 0) -> AdviceHoldState:
    return AdviceHoldState(active=active, generation=2, attempt_index=k, caused_hold=caused)


def ago(seconds: float) -> dt.datetime:
    return NOW - dt.timedelta(seconds=seconds)


CASES = [
    ("our hold, advice inactive", OURS, advice(active=False), ago(10), True, ADVICE_INACTIVE),
    ("our hold past the bound", OURS, advice(), ago(BOUND + 1), True, HELD_PAST_BOUND),
    ("our hold within the bound", OURS, advice(), ago(BOUND - 1), False, "within_bound"),
    ("our hold, no time known, active", OURS, advice(), None, False, "within_bound"),
    ("our hold, no time known, inactive", OURS, advice(active=False), None, True, ADVICE_INACTIVE),
    ("admin hold (scontrol hold)", ADMIN, advice(active=False), ago(99999), False, "not_our_hold"),
    (
        "user hold (uhold / sbatch --hold) with our milestone",
        USER,
        advice(active=False),
        ago(99999),
        False,
        "not_our_hold",
    ),
    (
        "requeue-hold by a person (no milestone)",
        OURS,
        advice(active=False, caused=False),
        ago(99999),
        False,
        "not_our_hold",
    ),
    ("no advice at all", OURS, None, ago(99999), False, "not_our_hold"),
    ("Slurm's max-requeue hold", MAXRQ, advice(active=False), ago(99999), False, "not_our_hold"),
    ("job moved to another attempt", held(rc=3), advice(active=False), ago(99999), False, "not_our_hold"),
    ("not held any more", UNHELD, advice(active=False), ago(99999), False, "not_held"),
]


@pytest.mark.parametrize("case, observation, state, since, release, reason", CASES, ids=[c[0] for c in CASES])
def test_judge_hold(
    case: str,
    observation: JobObservation,
    state: AdviceHoldState | None,
    since: dt.datetime | None,
    release: bool,
    reason: str,
) -> None:
    verdict = judge_hold(HeldJob(42, observation, since), state, now=NOW, hold_bound=BOUND)
    assert verdict.release is release
    assert verdict.reason == reason
    assert verdict.job_id == 42 and verdict.message


def test_jobs_to_release_filters_and_orders() -> None:
    jobs = [
        HeldJob(9, OURS, ago(BOUND * 2)),
        HeldJob(3, OURS, ago(1)),
        HeldJob(5, ADMIN, ago(BOUND * 2)),
        HeldJob(1, OURS, ago(1)),
    ]
    states = {9: advice(), 3: advice(active=False), 5: advice(active=False), 1: advice()}
    verdicts = jobs_to_release(jobs, states, now=NOW, hold_bound=BOUND)
    assert [(v.job_id, v.reason) for v in verdicts] == [(3, ADVICE_INACTIVE), (9, HELD_PAST_BOUND)]


def test_advice_hold_state_from_milestones() -> None:
    placed = ago(100)
    state, since = advice_hold_state(
        active=True, generation=1, attempt_index=0, milestones=[Milestone(1, StepKind.REQUEUE_HOLD, "STARTED", placed)]
    )
    assert state.caused_hold and since == placed
    released, since = advice_hold_state(
        active=True,
        generation=1,
        attempt_index=0,
        milestones=[
            Milestone(1, StepKind.REQUEUE_HOLD, "SUCCEEDED", placed),
            Milestone(1, StepKind.RELEASE, "SUCCEEDED", NOW),
        ],
    )
    assert not released.caused_hold and since is None
    nothing, _ = advice_hold_state(
        active=False, generation=1, attempt_index=0, milestones=[Milestone(1, StepKind.SET_EXCLUSIONS)]
    )
    assert not nothing.caused_hold


@given(
    reason=st.sampled_from(["JobHeldUser", "JobHeldAdmin", "JobHoldMaxRequeue", "BeginTime", None]),
    description=st.sampled_from([None, "job requeued in held state", "job requeued in special exit state"]),
    active=st.booleans(),
    rc=st.integers(0, 3),
    held_for=st.floats(0, 10_000),
)
def test_never_releases_a_hold_we_did_not_cause(
    reason: str | None, description: str | None, active: bool, rc: int, held_for: float
) -> None:
    observation = JobObservation(
        state="PENDING", restart_count=rc, held=True, state_reason=reason, state_description=description, priority=0
    )
    verdict = judge_hold(
        HeldJob(1, observation, ago(held_for)), advice(active=active, caused=False), now=NOW, hold_bound=BOUND
    )
    assert not verdict.release
    if reason == "JobHeldAdmin" or (reason == "JobHeldUser" and description is None):
        assert not judge_hold(
            HeldJob(1, observation, ago(held_for)), advice(active=active), now=NOW, hold_bound=BOUND
        ).release
