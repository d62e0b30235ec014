"""The controller's step planner: rule table, safety properties, and convergence against a simulated Slurm."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain.control.planner import (
    AdviceState,
    DispositionReason,
    HoldKind,
    JobObservation,
    Milestone,
    StepKind,
    hold_kind,
    idempotency_key,
    plan_next_step,
    shadow_plan,
)

NOW = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
LATER = NOW + dt.timedelta(hours=1)

RQ, EX, REL, CAN = StepKind.REQUEUE_HOLD, StepKind.SET_EXCLUSIONS, StepKind.RELEASE, StepKind.CANCEL
DONE, ABANDON, WAIT = StepKind.DONE, StepKind.ABANDON, StepKind.WAIT
R = DispositionReason


def restart(
    k: int = 0, excl: tuple[str, ...] = ("n1",), gen: int = 1, expires: dt.datetime | None = LATER
) -> AdviceState:
    return AdviceState(
        advice_id=7, generation=gen, operation="RESTART", attempt_index=k, exclusions=excl, expires_at=expires
    )


def terminate(k: int = 0, gen: int = 1) -> AdviceState:
    return AdviceState(advice_id=7, generation=gen, operation="TERMINATE", attempt_index=k, expires_at=LATER)


def obs(state: str = "FAILED", rc: int = 0, **kw: Any) -> JobObservation:
    kw.setdefault("requeue_eligible", True)
    return JobObservation(state=state, restart_count=rc, **kw)


def our_held(rc: int = 1, excluded: tuple[str, ...] = ()) -> JobObservation:
    return obs(
        "PENDING",
        rc,
        held=True,
        state_reason="JobHeldUser",
        state_description="job requeued in held state",
        priority=0,
        excluded_nodes=excluded,
    )


def ms(*steps: StepKind | tuple[StepKind, str], gen: int = 1) -> tuple[Milestone, ...]:
    out = []
    for s in steps:
        step, status = (s, "SUCCEEDED") if isinstance(s, StepKind) else s
        out.append(Milestone(gen, step, status))
    return tuple(out)


ADMIN_HELD = obs("PENDING", 1, held=True, state_reason="JobHeldAdmin", priority=0)
USER_HELD = obs("PENDING", 1, held=True, state_reason="JobHeldUser", priority=0)
SPECIAL = obs(
    "SPECIAL_EXIT",
    1,
    held=True,
    state_reason="JobHeldUser",
    state_description="job requeued in special exit state",
    priority=0,
)
MAXRQ = obs("PENDING", 1, held=True, state_reason="JobHoldMaxRequeue", priority=0)

CASES = [
    # RESTART, still the failed/hung attempt
    ("failed attempt is requeue-held", restart(), obs("FAILED"), (), RQ, None),
    ("running (hung) attempt is requeue-held", restart(), obs("RUNNING", nodes=("n1",)), (), RQ, None),
    *[
        (f"{s} is requeue-held", restart(), obs(s), (), RQ, None)
        for s in ["COMPLETED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "COMPLETING"]
    ],
    ("no-requeue job", restart(), obs("FAILED", requeue_eligible=False), (), ABANDON, R.REQUEUE_DISABLED),
    ("pending attempt cannot be requeued", restart(), obs("PENDING"), (), WAIT, None),
    ("requeue recorded but not visible: never twice", restart(), obs("FAILED"), ms(RQ), WAIT, None),
    ("requeue intent only (crash before effect): redo", restart(), obs("FAILED"), ms((RQ, "STARTED")), RQ, None),
    ("failed requeue attempt is retried", restart(), obs("FAILED"), ms((RQ, "FAILED")), RQ, None),
    # RESTART, successor held by us
    ("held by us, exclusions missing", restart(), our_held(), ms(RQ), EX, None),
    ("held by us, exclusions set", restart(), our_held(excluded=("n1",)), ms(RQ, EX), REL, None),
    ("held by us, no exclusions wanted", restart(excl=()), our_held(), ms(RQ), REL, None),
    ("held by us after crash (intent only)", restart(), our_held(excluded=("n1",)), ms((RQ, "STARTED")), REL, None),
    (
        "exclusions set but milestone lost",
        restart(),
        our_held(excluded=("n1", "u9")),
        ms(RQ, (EX, "STARTED")),
        REL,
        None,
    ),
    (
        "held by us from an earlier generation",
        restart(excl=("n1", "n2"), gen=2),
        our_held(excluded=("n1",)),
        ms(RQ, EX, gen=1),
        EX,
        None,
    ),
    (
        "release intent, still held: release again",
        restart(),
        our_held(excluded=("n1",)),
        ms(RQ, EX, (REL, "STARTED")),
        REL,
        None,
    ),
    # RESTART, successor not held
    (
        "released and observed",
        restart(),
        obs("PENDING", 1, state_reason="BeginTime", excluded_nodes=("n1",)),
        ms(RQ, EX, REL),
        DONE,
        R.DESIRED_STATE_OBSERVED,
    ),
    (
        "release took effect, milestone lost",
        restart(),
        obs("RUNNING", 1, excluded_nodes=("n1",), nodes=("n2",)),
        ms(RQ, EX),
        DONE,
        R.DESIRED_STATE_OBSERVED,
    ),
    (
        "Slurm requeued it itself, exclusions present",
        restart(),
        obs("PENDING", 1, excluded_nodes=("n1",)),
        (),
        DONE,
        R.ALREADY_SATISFIED,
    ),
    (
        "Slurm requeued it, no exclusions wanted",
        restart(excl=()),
        obs("RUNNING", 1, nodes=("n1",)),
        (),
        DONE,
        R.ALREADY_SATISFIED,
    ),
    (
        "Slurm requeued it, pending: set exclusions",
        restart(),
        obs("PENDING", 1, state_reason="BeginTime"),
        (),
        EX,
        None,
    ),
    (
        "Slurm requeued it, running on excluded node",
        restart(),
        obs("RUNNING", 1, nodes=("n1",)),
        (),
        ABANDON,
        R.SUPERSEDED,
    ),
    (
        "Slurm requeued it, running elsewhere",
        restart(),
        obs("RUNNING", 1, nodes=("n5",)),
        (),
        DONE,
        R.ALREADY_SATISFIED,
    ),
    (
        "successor already ended without exclusions",
        restart(),
        obs("FAILED", 1, nodes=("n5",)),
        (),
        ABANDON,
        R.SUPERSEDED,
    ),
    ("job moved two attempts on", restart(), obs("RUNNING", 2), ms(RQ), ABANDON, R.SUPERSEDED),
    # RESTART, holds that are not ours
    ("admin hold is never released", restart(), replace(ADMIN_HELD, excluded_nodes=("n1",)), ms(RQ), WAIT, None),
    ("admin hold: exclusions may still be set", restart(), ADMIN_HELD, (), EX, None),
    ("user hold without our milestone", restart(), replace(USER_HELD, excluded_nodes=("n1",)), (), WAIT, None),
    ("someone else's requeuehold", restart(), our_held(excluded=("n1",)), (), WAIT, None),
    ("re-held by a person after our release", restart(), our_held(excluded=("n1",)), ms(RQ, EX, REL), WAIT, None),
    ("special exit hold", restart(), replace(SPECIAL, excluded_nodes=("n1",)), ms(RQ), WAIT, None),
    ("Slurm's MaxBatchRequeue hold", restart(), MAXRQ, (), ABANDON, R.RETRIES_EXHAUSTED_BY_SLURM),
    # RESTART, job gone / other submission / expiry / authorization
    ("job not found", restart(), None, (), ABANDON, R.JOB_NOT_FOUND),
    ("restart count below the attempt", restart(k=2), obs("RUNNING", 0), (), ABANDON, R.JOB_NOT_FOUND),
    (
        "expired before converging",
        restart(expires=NOW - dt.timedelta(seconds=1)),
        obs("FAILED"),
        (),
        ABANDON,
        R.ADVICE_EXPIRED,
    ),
    (
        "expired but converged wins",
        restart(expires=NOW - dt.timedelta(seconds=1)),
        obs("PENDING", 1, excluded_nodes=("n1",)),
        ms(RQ, EX, REL),
        DONE,
        R.DESIRED_STATE_OBSERVED,
    ),
    ("no expiry", restart(expires=None), obs("FAILED"), (), RQ, None),
    # TERMINATE
    ("terminate running attempt", terminate(), obs("RUNNING"), (), CAN, None),
    ("terminate pending attempt", terminate(), obs("PENDING"), (), CAN, None),
    ("terminate ended attempt", terminate(), obs("FAILED"), (), DONE, R.ALREADY_SATISFIED),
    ("terminate observed after our cancel", terminate(), obs("CANCELLED"), ms(CAN), DONE, R.DESIRED_STATE_OBSERVED),
    (
        "terminate: cancel took effect, milestone lost",
        terminate(),
        obs("CANCELLED"),
        ms((CAN, "STARTED")),
        DONE,
        R.DESIRED_STATE_OBSERVED,
    ),
    ("terminate: cancel sent, still running", terminate(), obs("RUNNING"), ms(CAN), WAIT, None),
    ("terminate: completing", terminate(), obs("COMPLETING"), (), WAIT, None),
    ("terminate our held successor", terminate(gen=2), our_held(), ms(RQ, gen=1), CAN, None),
    ("terminate Slurm's automatic requeue", terminate(), obs("PENDING", 1, state_reason="BeginTime"), (), CAN, None),
    ("terminate admin-held successor (cancel is not release)", terminate(), ADMIN_HELD, (), CAN, None),
    ("terminate: job gone", terminate(), None, (), DONE, R.ALREADY_SATISFIED),
    ("terminate: moved on", terminate(), obs("RUNNING", 2), (), ABANDON, R.SUPERSEDED),
    ("terminate: other submission", terminate(k=3), obs("RUNNING", 0), (), ABANDON, R.JOB_NOT_FOUND),
]


@pytest.mark.parametrize("case, advice, observation, milestones, kind, reason", CASES, ids=[c[0] for c in CASES])
def test_planner_rules(
    case: str,
    advice: AdviceState,
    observation: JobObservation | None,
    milestones: tuple[Milestone, ...],
    kind: StepKind,
    reason: DispositionReason | None,
) -> None:
    step = plan_next_step(advice, observation, now=NOW, milestones=milestones)
    assert step.kind is kind, step.message
    assert step.reason is reason
    assert step.message
    if step.is_action:
        assert step.idempotency_key == f"7:{advice.generation}:{kind.value}"
    else:
        assert step.idempotency_key is None


def test_set_exclusions_keeps_the_users_own_exclusions() -> None:
    step = plan_next_step(restart(excl=("n1", "n3")), our_held(excluded=("u9",)), now=NOW, milestones=ms(RQ))
    assert step.kind is EX and step.exclusions == ("n1", "n3", "u9")


def test_not_authorized_reports_what_it_would_have_done() -> None:
    step = plan_next_step(restart(), obs("FAILED"), now=NOW, authorized=False)
    assert step.kind is ABANDON and step.reason is R.NOT_AUTHORIZED
    assert "requeue_hold" in step.message
    done = plan_next_step(restart(), obs("PENDING", 1, excluded_nodes=("n1",)), now=NOW, authorized=False)
    assert done.kind is DONE and done.reason is R.ALREADY_SATISFIED


def test_unknown_operation_is_an_error() -> None:
    with pytest.raises(ValueError):
        plan_next_step(replace(restart(), operation="RELEASE"), obs(), now=NOW)


def test_idempotency_key_format() -> None:
    assert idempotency_key(12, 3, RQ) == "12:3:requeue_hold"


@pytest.mark.parametrize(
    "observation, kind",
    [
        (our_held(), HoldKind.REQUEUE_HOLD),
        (obs("PENDING", 1, held=True, state_reason="job_requeued_in_held_state", priority=0), HoldKind.REQUEUE_HOLD),
        (ADMIN_HELD, HoldKind.ADMIN),
        (USER_HELD, HoldKind.USER),
        (SPECIAL, HoldKind.SPECIAL_EXIT),
        (MAXRQ, HoldKind.MAX_REQUEUE),
        (
            obs(
                "PENDING",
                1,
                held=True,
                state_reason="JobHeldUser",
                state_description="launch failed requeued held",
                priority=0,
            ),
            HoldKind.LAUNCH_FAILED,
        ),
        (obs("PENDING", 1, priority=0, state_reason="Dependency"), HoldKind.OTHER),
        (obs("PENDING", 1, state_reason="BeginTime", priority=100), HoldKind.NONE),
        (obs("RUNNING", 0), HoldKind.NONE),
    ],
)
def test_hold_kind(observation: JobObservation, kind: HoldKind) -> None:
    assert hold_kind(observation) is kind


# ---- shadow plans (observe mode) ----
def test_shadow_plan_full_restart_sequence() -> None:
    steps = shadow_plan(restart(), obs("RUNNING", nodes=("n1",)), now=NOW)
    assert [s.kind for s in steps] == [RQ, EX, REL, DONE]
    assert steps[-1].reason is R.DESIRED_STATE_OBSERVED
    assert [s.idempotency_key for s in steps[:3]] == ["7:1:requeue_hold", "7:1:update_exclusions", "7:1:release"]


def test_shadow_plan_skips_what_is_already_true() -> None:
    assert [s.kind for s in shadow_plan(restart(excl=()), obs("FAILED"), now=NOW)] == [RQ, REL, DONE]
    assert [s.kind for s in shadow_plan(terminate(), obs("RUNNING"), now=NOW)] == [CAN, DONE]
    assert [s.kind for s in shadow_plan(terminate(), obs("FAILED"), now=NOW)] == [DONE]
    assert [s.kind for s in shadow_plan(restart(), None, now=NOW)] == [ABANDON]


# ---- safety properties ----
states = st.sampled_from(
    [
        "PENDING",
        "RUNNING",
        "FAILED",
        "COMPLETED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "COMPLETING",
        "SPECIAL_EXIT",
        "SUSPENDED",
    ]
)
reasons = st.sampled_from(
    [None, "JobHeldUser", "JobHeldAdmin", "BeginTime", "JobHoldMaxRequeue", "job_requeued_in_held_state", "None"]
)
descriptions = st.sampled_from(
    [None, "job requeued in held state", "job requeued in special exit state", "launch failed requeued held"]
)
nodes = st.sets(st.sampled_from(["n1", "n2", "n3"]), max_size=3).map(lambda s: tuple(sorted(s)))
observations = st.builds(
    JobObservation,
    state=states,
    restart_count=st.integers(0, 3),
    held=st.booleans(),
    state_reason=reasons,
    state_description=descriptions,
    priority=st.one_of(st.none(), st.sampled_from([0, 1, 4294901759])),
    excluded_nodes=nodes,
    nodes=nodes,
    requeue_eligible=st.one_of(st.none(), st.booleans()),
)
non_hold_steps = st.sampled_from([EX, REL, CAN])
statuses = st.sampled_from(["STARTED", "SUCCEEDED", "FAILED"])
advices = st.builds(
    AdviceState,
    advice_id=st.just(1),
    generation=st.integers(1, 3),
    operation=st.sampled_from(["RESTART", "TERMINATE"]),
    attempt_index=st.integers(0, 2),
    exclusions=nodes,
    expires_at=st.sampled_from([None, LATER, NOW - dt.timedelta(minutes=1)]),
)


@given(advices, observations, st.lists(st.tuples(st.integers(1, 3), non_hold_steps, statuses), max_size=4))
def test_never_releases_a_hold_without_our_requeue_milestone(
    advice: AdviceState, observation: JobObservation, raw: list[tuple[int, StepKind, str]]
) -> None:
    milestones = tuple(Milestone(g, s, st_) for g, s, st_ in raw)
    assert plan_next_step(advice, observation, now=NOW, milestones=milestones).kind is not REL


@given(
    advices,
    observations,
    st.lists(st.tuples(st.integers(1, 3), st.sampled_from([RQ, EX, REL, CAN]), statuses), max_size=4),
)
def test_never_releases_an_admin_or_user_hold(
    advice: AdviceState, observation: JobObservation, raw: list[tuple[int, StepKind, str]]
) -> None:
    milestones = tuple(Milestone(g, s, st_) for g, s, st_ in raw)
    step = plan_next_step(advice, observation, now=NOW, milestones=milestones)
    if hold_kind(observation) is not HoldKind.REQUEUE_HOLD:
        assert step.kind is not REL


@given(
    advices,
    observations,
    st.lists(st.tuples(st.integers(1, 3), st.sampled_from([RQ, EX, REL, CAN]), statuses), max_size=4),
)
def test_planner_is_deterministic_and_consistent(
    advice: AdviceState, observation: JobObservation, raw: list[tuple[int, StepKind, str]]
) -> None:
    milestones = tuple(Milestone(g, s, st_) for g, s, st_ in raw)
    step = plan_next_step(advice, observation, now=NOW, milestones=milestones)
    assert step == plan_next_step(advice, observation, now=NOW, milestones=milestones)
    assert (step.reason is not None) == (step.kind in {DONE, ABANDON})
    if advice.operation == "TERMINATE":
        assert step.kind not in {RQ, EX, REL}
    if step.kind is RQ:
        assert observation.restart_count == advice.attempt_index  # never requeues a successor
        assert not any(m.step is RQ and m.status == "SUCCEEDED" for m in milestones)
    if advice.expires_at is not None and NOW > advice.expires_at:
        assert step.kind in {DONE, ABANDON}


# ---- convergence against a simulated Slurm 22.05 (NOTES §3), with crashes ----
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}


@dataclass
class FakeSlurm:
    """A tiny model of one job in slurmctld: just what requeuehold/update/release/scancel change."""

    state: str
    restarts: int
    requeue: bool
    nodes: tuple[str, ...]
    all_nodes: tuple[str, ...] = ("n1", "n2", "n3")
    excluded: tuple[str, ...] = ()
    reason: str = "None"
    description: str | None = None
    priority: int = 4294901759
    effects: list[str] = field(default_factory=list)

    def observe(self) -> JobObservation:
        return JobObservation(
            state=self.state,
            restart_count=self.restarts,
            held=self.priority == 0,
            state_reason=self.reason,
            state_description=self.description,
            priority=self.priority,
            excluded_nodes=self.excluded,
            nodes=self.nodes,
            requeue_eligible=self.requeue,
        )

    def run(self, kind: StepKind, exclusions: tuple[str, ...]) -> bool:
        """Apply a command; False means Slurm refused it (rc 1) and nothing changed."""
        if kind is RQ:
            if not self.requeue or self.state == "PENDING":
                return False
            self.state, self.restarts, self.nodes = "PENDING", self.restarts + 1, ()
            self.reason, self.description, self.priority = "JobHeldUser", "job requeued in held state", 0
        elif kind is EX:
            if self.state != "PENDING":
                return False
            self.excluded = exclusions
        elif kind is REL:
            if self.priority != 0:
                return False
            self.priority, self.reason, self.description = 100, "BeginTime", None
        elif kind is CAN:
            if self.state in ENDED:
                return False
            self.state, self.priority, self.nodes = "CANCELLED", 100, ()
        self.effects.append(kind.value)
        return True

    def tick(self) -> None:
        """The scheduler starts an eligible pending job on a node it may use."""
        if self.state == "PENDING" and self.priority != 0:
            usable = [n for n in self.all_nodes if n not in self.excluded]
            if usable:
                self.state, self.nodes, self.reason = "RUNNING", (usable[0],), "None"


@settings(max_examples=300, deadline=None)
@given(
    operation=st.sampled_from(["RESTART", "TERMINATE"]),
    start_state=st.sampled_from(["RUNNING", "FAILED", "TIMEOUT", "NODE_FAIL", "COMPLETED", "CANCELLED"]),
    requeue=st.booleans(),
    exclusions=nodes.filter(lambda n: len(n) < 3),
    crashes=st.lists(st.sampled_from(["none", "before_effect", "after_effect"]), max_size=12),
    scheduler_runs=st.lists(st.booleans(), max_size=12),
)
def test_controller_converges_against_simulated_slurm_despite_crashes(
    operation: str,
    start_state: str,
    requeue: bool,
    exclusions: tuple[str, ...],
    crashes: list[str],
    scheduler_runs: list[bool],
) -> None:
    slurm = FakeSlurm(state=start_state, restarts=0, requeue=requeue, nodes=("n1",) if start_state == "RUNNING" else ())
    advice = AdviceState(
        advice_id=1, generation=1, operation=operation, attempt_index=0, exclusions=exclusions, expires_at=LATER
    )
    milestones: list[Milestone] = []
    effective: list[str] = []
    final = None
    for turn in range(40):
        step = plan_next_step(advice, slurm.observe(), now=NOW, milestones=milestones)
        if not step.is_action:
            final = step
            if step.kind is WAIT:
                slurm.tick()
                continue
            break
        crash = crashes[turn] if turn < len(crashes) else "none"
        milestones.append(Milestone(1, step.kind, "STARTED"))  # write-ahead intent
        if crash == "before_effect":
            continue  # the controller died before the command reached Slurm
        took_effect = slurm.run(step.kind, step.exclusions)
        if took_effect:
            effective.append(step.kind.value)
        if crash == "after_effect":
            continue  # the command took effect but SUCCEEDED was never recorded
        milestones.append(Milestone(1, step.kind, "SUCCEEDED" if took_effect else "FAILED"))
        if turn < len(scheduler_runs) and scheduler_runs[turn]:
            slurm.tick()
    assert final is not None and final.kind in {DONE, ABANDON}, final
    # No command that took effect is ever repeated.
    assert len(effective) == len(set(effective)), effective
    assert effective == slurm.effects
    if operation == "TERMINATE":
        assert final.kind is DONE
        assert slurm.state in ENDED
        assert "requeue_hold" not in effective and "release" not in effective
    elif not requeue:
        assert final.kind is ABANDON and final.reason is R.REQUEUE_DISABLED
        assert effective == []
    else:
        assert final.kind is DONE and final.reason is R.DESIRED_STATE_OBSERVED, final
        assert slurm.restarts == 1 and slurm.priority != 0
        assert set(exclusions) <= set(slurm.excluded)
        assert effective[0] == "requeue_hold" and "release" in effective
        assert not set(slurm.nodes) & set(exclusions)


def expedited_held(rc: int = 1) -> JobObservation:
    """Slurm's own requeue-hold of an expedited job that failed by itself ("holding expedited requeue")."""
    return replace(our_held(rc), expedited=True)


def test_slurms_hold_of_an_expedited_job_that_failed_by_itself_is_released() -> None:
    # no milestone of ours: Slurm itself requeue-held attempt 1, where our requeue-hold would have put it
    assert plan_next_step(restart(excl=("n1",)), expedited_held(), now=NOW).kind is EX
    step = plan_next_step(restart(excl=()), expedited_held(), now=NOW)
    assert step.kind is REL and step.idempotency_key == "7:1:release"
    # after our release the attempt runs: we did bring it back
    done = plan_next_step(restart(excl=()), obs("RUNNING", 1, expedited=True), now=NOW, milestones=[Milestone(1, REL)])
    assert (done.kind, done.reason) == (DONE, R.DESIRED_STATE_OBSERVED)
    # a hold on an expedited job that is not Slurm's requeue-hold, or of another attempt, is never ours to release
    user = replace(expedited_held(), state_description=None)
    assert plan_next_step(restart(excl=()), user, now=NOW).kind is WAIT
    assert plan_next_step(restart(excl=()), replace(our_held(), expedited=False), now=NOW).kind is WAIT


def test_slurms_expedited_restart_is_the_retry_wherever_it_runs() -> None:
    # a node failure: Slurm requeued the expedited job itself and it runs again, even on the node we would exclude
    for state, nodes in (("RUNNING", ("n1",)), ("COMPLETED", ())):
        step = plan_next_step(restart(excl=("n1",)), obs(state, 1, nodes=nodes, expedited=True), now=NOW)
        assert (step.kind, step.reason) == (DONE, R.ALREADY_SATISFIED), step
        assert "expedited requeue" in step.message
    # not expedited: the same observation is a restart that went where it must not
    plain = plan_next_step(restart(excl=("n1",)), obs("RUNNING", 1, nodes=("n1",)), now=NOW)
    assert (plain.kind, plain.reason) == (ABANDON, R.SUPERSEDED)
