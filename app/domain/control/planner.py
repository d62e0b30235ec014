"""The controller's step planner: from Advice, a fresh Slurm observation and our milestones, the next step."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from app.domain.control import states


class StepKind(StrEnum):
    """A scheduler command (the value is the milestone's step name) or a terminal/waiting outcome."""

    REQUEUE_HOLD = "requeue_hold"  # scontrol requeuehold <id>
    SET_EXCLUSIONS = "update_exclusions"  # scontrol update JobId=<id> ExcNodeList=<nodes>
    RELEASE = "release"  # scontrol release <id>
    CANCEL = "cancel"  # scancel <id>
    DONE = "done"  # CONVERGED
    ABANDON = "abandon"  # ABANDONED
    WAIT = "wait"  # nothing to do now; look again later


ACTIONS = frozenset({StepKind.REQUEUE_HOLD, StepKind.SET_EXCLUSIONS, StepKind.RELEASE, StepKind.CANCEL})
OBSERVE_RECHECK = 30.0  # seconds between looks at an Advice the controller may not act on (now)


class Disposition(StrEnum):
    PENDING = "PENDING"
    CONVERGED = "CONVERGED"
    ABANDONED = "ABANDONED"


class DispositionReason(StrEnum):
    DESIRED_STATE_OBSERVED = "DESIRED_STATE_OBSERVED"
    ALREADY_SATISFIED = "ALREADY_SATISFIED"
    ADVICE_EXPIRED = "ADVICE_EXPIRED"
    JOB_NOT_FOUND = "JOB_NOT_FOUND"
    REQUEUE_DISABLED = "REQUEUE_DISABLED"
    RETRIES_EXHAUSTED_BY_SLURM = "RETRIES_EXHAUSTED_BY_SLURM"
    SUPERSEDED = "SUPERSEDED"
    NOT_AUTHORIZED = "NOT_AUTHORIZED"


class HoldKind(StrEnum):
    """Who (judging by Slurm's reason) holds a pending job."""

    NONE = "NONE"
    REQUEUE_HOLD = "REQUEUE_HOLD"  # scontrol requeuehold: JobHeldUser + "job requeued in held state"
    USER = "USER"  # scontrol uhold / sbatch --hold: JobHeldUser
    ADMIN = "ADMIN"  # scontrol hold as root: JobHeldAdmin
    SPECIAL_EXIT = "SPECIAL_EXIT"  # RequeueExitHold or requeuehold State=SpecialExit
    MAX_REQUEUE = "MAX_REQUEUE"  # Slurm's own MaxBatchRequeue hold: JobHoldMaxRequeue
    LAUNCH_FAILED = "LAUNCH_FAILED"  # Slurm requeue-held a job whose launch failed
    OTHER = "OTHER"  # priority 0 for a reason we do not recognise


@dataclass(frozen=True)
class AdviceState:
    """The Advice generation being reconciled."""

    advice_id: int
    generation: int
    operation: str  # RESTART | TERMINATE
    attempt_index: int
    exclusions: tuple[str, ...] = ()
    expires_at: dt.datetime | None = None
    mode: str = "act"


@dataclass(frozen=True)
class JobObservation:
    """A fresh look at the Slurm job (squeue --json fields, node lists already expanded)."""

    state: str
    restart_count: int
    held: bool = False
    state_reason: str | None = None  # e.g. JobHeldUser, JobHeldAdmin, JobHoldMaxRequeue, BeginTime
    state_description: str | None = None  # e.g. "job requeued in held state"
    priority: int | None = None
    excluded_nodes: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()
    requeue_eligible: bool | None = None
    expedited: bool = False  # submitted with --requeue=expedite (25.11+)


@dataclass(frozen=True)
class Milestone:
    """One of our scheduler actions for this Advice, any generation, in recorded order.

    The controller records STARTED *before* sending a command and SUCCEEDED after it, so a
    crash between the two leaves the STARTED intent behind.
    """

    generation: int
    step: StepKind
    status: str = "SUCCEEDED"  # STARTED | SUCCEEDED (FAILED/SKIPPED/SHADOW rows are ignored)
    at: dt.datetime | None = None


@dataclass(frozen=True)
class Step:
    """The planner's answer: a command to run, or a terminal/waiting outcome with its reason."""

    kind: StepKind
    message: str
    reason: DispositionReason | None = None  # for DONE / ABANDON
    idempotency_key: str | None = None  # for commands: "<advice_id>:<generation>:<step>"
    exclusions: tuple[str, ...] = ()  # for SET_EXCLUSIONS: the whole ExcNodeList to set

    @property
    def is_action(self) -> bool:
        return self.kind in ACTIONS

    @property
    def disposition(self) -> Disposition:
        if self.kind is StepKind.DONE:
            return Disposition.CONVERGED
        if self.kind is StepKind.ABANDON:
            return Disposition.ABANDONED
        return Disposition.PENDING


def idempotency_key(advice_id: int, generation: int, step: StepKind) -> str:
    """Deterministic key of one command for one Advice generation."""
    return f"{advice_id}:{generation}:{step.value}"


def _norm(text: str | None) -> str:
    return (text or "").strip().lower().replace("_", " ")


def hold_kind(observation: JobObservation) -> HoldKind:
    """Classify the hold on a job from Slurm's reason and description (NOTES §3, job_mgr.c)."""
    reason, description = _norm(observation.state_reason), _norm(observation.state_description)
    held = observation.held or observation.priority == 0 or observation.state.upper() == "SPECIAL_EXIT"
    if reason in {"jobholdmaxrequeue", "launch failed requeued held"} or "max requeue" in reason:
        return HoldKind.MAX_REQUEUE
    if not held:
        return HoldKind.NONE
    if observation.state.upper() == "SPECIAL_EXIT" or "special exit" in description:
        return HoldKind.SPECIAL_EXIT
    if "launch failed requeued held" in description:
        return HoldKind.LAUNCH_FAILED
    if reason == "jobheldadmin":
        return HoldKind.ADMIN
    if "requeued in held state" in reason or "requeued in held state" in description:
        return HoldKind.REQUEUE_HOLD
    if reason == "jobhelduser":
        return HoldKind.USER
    return HoldKind.OTHER


def _counts(milestone: Milestone) -> bool:
    return milestone.status in {"STARTED", "SUCCEEDED"}


def outstanding_requeue_hold(milestones: Sequence[Milestone]) -> Milestone | None:
    """Our latest requeue-hold (STARTED or SUCCEEDED) not followed by a successful release of ours."""
    last_hold = max(
        (i for i, m in enumerate(milestones) if m.step is StepKind.REQUEUE_HOLD and _counts(m)), default=None
    )
    if last_hold is None:
        return None
    if any(m.step is StepKind.RELEASE and m.status == "SUCCEEDED" for m in milestones[last_hold + 1 :]):
        return None
    return milestones[last_hold]


def hold_caused_by_us(milestones: Sequence[Milestone], observation: JobObservation, attempt_index: int) -> bool:
    """The job's current hold is the one our requeue-hold placed: our intent exists, no release of ours
    succeeded after it, the job is the attempt our requeue created, and Slurm shows a requeue-hold."""
    return (
        outstanding_requeue_hold(milestones) is not None
        and observation.restart_count == attempt_index + 1
        and hold_kind(observation) is HoldKind.REQUEUE_HOLD
    )


def slurm_expedited_hold(observation: JobObservation, attempt_index: int) -> bool:
    """Slurm's own requeue-hold of an expedited job that failed by itself (no node failure, no failed epilog:
    "holding expedited requeue ... as no epilogs failed"): it already made attempt `attempt_index` + 1 and holds it
    exactly where our requeue-hold would have, so the restart is ours to release."""
    return (
        observation.expedited
        and observation.restart_count == attempt_index + 1
        and hold_kind(observation) is HoldKind.REQUEUE_HOLD
    )


def _succeeded(milestones: Sequence[Milestone], step: StepKind, generation: int | None = None) -> bool:
    return any(
        m.step is step and m.status == "SUCCEEDED" and (generation is None or m.generation == generation)
        for m in milestones
    )


def _intended(milestones: Sequence[Milestone], step: StepKind) -> bool:
    return any(m.step is step and _counts(m) for m in milestones)


def plan_next_step(
    advice: AdviceState,
    observation: JobObservation | None,
    *,
    now: dt.datetime,
    milestones: Sequence[Milestone] = (),
    authorized: bool = True,
) -> Step:
    """The next step for this Advice generation; commands only when ``authorized`` (act mode)."""
    if advice.operation == "RESTART":
        step = _plan_restart(advice, observation, milestones)
    elif advice.operation == "TERMINATE":
        step = _plan_terminate(advice, observation, milestones)
    else:
        raise ValueError(f"unknown Advice operation {advice.operation!r}")
    if step.kind in {StepKind.DONE, StepKind.ABANDON}:
        return step
    if advice.expires_at is not None and now > advice.expires_at:
        return Step(
            StepKind.ABANDON,
            f"Advice expired at {advice.expires_at.isoformat()} before it converged (next step would "
            f"have been: {step.message})",
            DispositionReason.ADVICE_EXPIRED,
        )
    if step.is_action:
        step = replace(step, idempotency_key=idempotency_key(advice.advice_id, advice.generation, step.kind))
        if not authorized:
            return Step(
                StepKind.ABANDON,
                f"mode {advice.mode}: not authorized to change Slurm; would have run {step.kind.value}: {step.message}",
                DispositionReason.NOT_AUTHORIZED,
            )
    return step


def _done(milestones: Sequence[Milestone], ours: StepKind, message: str) -> Step:
    acted = _intended(milestones, ours) or (ours is StepKind.REQUEUE_HOLD and _intended(milestones, StepKind.RELEASE))
    reason = DispositionReason.DESIRED_STATE_OBSERVED if acted else DispositionReason.ALREADY_SATISFIED
    return Step(StepKind.DONE, message, reason)


def _plan_restart(advice: AdviceState, obs: JobObservation | None, milestones: Sequence[Milestone]) -> Step:
    k = advice.attempt_index
    if obs is None:
        return Step(StepKind.ABANDON, "Slurm no longer knows the job", DispositionReason.JOB_NOT_FOUND)
    if obs.restart_count < k:
        return Step(
            StepKind.ABANDON,
            f"the job's restart count {obs.restart_count} is below attempt {k}: it is another submission",
            DispositionReason.JOB_NOT_FOUND,
        )
    hold = hold_kind(obs)
    if hold is HoldKind.MAX_REQUEUE:
        return Step(
            StepKind.ABANDON,
            f"Slurm held the job after too many requeues ({obs.state_reason or obs.state_description})",
            DispositionReason.RETRIES_EXHAUSTED_BY_SLURM,
        )
    state = obs.state.upper()
    wanted = set(advice.exclusions)
    missing = wanted - set(obs.excluded_nodes)
    full_list = tuple(sorted(set(obs.excluded_nodes) | wanted))

    if obs.restart_count == k:
        if obs.requeue_eligible is False:
            return Step(
                StepKind.ABANDON,
                "the job is not requeue-eligible (--no-requeue): Slurm refuses requeue",
                DispositionReason.REQUEUE_DISABLED,
            )
        if _succeeded(milestones, StepKind.REQUEUE_HOLD):
            # Never requeue twice: a second requeue-hold would kill the successor.
            return Step(
                StepKind.WAIT,
                f"our requeue-hold succeeded but Slurm still shows attempt {k}; waiting for a fresh observation",
            )
        if state not in states.REQUEUEABLE:
            return Step(StepKind.WAIT, f"attempt {k} is {state}; Slurm cannot requeue it in this state")
        return Step(StepKind.REQUEUE_HOLD, f"requeue attempt {k} ({state}) into a held state")

    if obs.restart_count > k + 1:
        return Step(
            StepKind.ABANDON,
            f"the job already moved past attempt {k + 1} (restart count {obs.restart_count})",
            DispositionReason.SUPERSEDED,
        )

    # The successor (attempt k+1) exists.
    if hold is not HoldKind.NONE:
        # our requeue-hold, or Slurm's own of an expedited job that failed by itself: either way attempt k+1 waits
        # for our release (never left held)
        if hold_caused_by_us(milestones, obs, k) or slurm_expedited_hold(obs, k):
            if missing:
                return Step(
                    StepKind.SET_EXCLUSIONS,
                    f"exclude {', '.join(sorted(missing))} while attempt {k + 1} is held",
                    exclusions=full_list,
                )
            return Step(
                StepKind.RELEASE,
                f"release attempt {k + 1}" + (f" with {', '.join(sorted(wanted))} excluded" if wanted else ""),
            )
        if missing and state == "PENDING":
            return Step(
                StepKind.SET_EXCLUSIONS,
                f"exclude {', '.join(sorted(missing))} while attempt {k + 1} is pending",
                exclusions=full_list,
            )
        return Step(
            StepKind.WAIT,
            f"attempt {k + 1} is held ({obs.state_reason or hold.value}) by a hold we did not place; "
            f"we never release it",
        )

    if not missing:
        return _done(
            milestones,
            StepKind.REQUEUE_HOLD,
            f"attempt {k + 1} is unheld ({state})" + (f" with {', '.join(sorted(wanted))} excluded" if wanted else ""),
        )
    if state == "PENDING":
        return Step(
            StepKind.SET_EXCLUSIONS,
            f"exclude {', '.join(sorted(missing))} while attempt {k + 1} is pending",
            exclusions=full_list,
        )
    if obs.expedited and not _intended(milestones, StepKind.REQUEUE_HOLD):
        # Slurm requeued the job itself at once (--requeue=expedite, a node failure): its restart is the retry,
        # wherever it went; acting on it again would kill the attempt Slurm just started
        return Step(
            StepKind.DONE,
            f"Slurm restarted the job itself (expedited requeue): attempt {k + 1} is {state}",
            DispositionReason.ALREADY_SATISFIED,
        )
    on_excluded = sorted(wanted & set(obs.nodes))
    if on_excluded:
        return Step(
            StepKind.ABANDON,
            f"attempt {k + 1} already runs on excluded node(s) {', '.join(on_excluded)}; too late to exclude them",
            DispositionReason.SUPERSEDED,
        )
    if state in states.TERMINAL or not obs.nodes:
        return Step(
            StepKind.ABANDON,
            f"attempt {k + 1} is {state} before the exclusions could be set",
            DispositionReason.SUPERSEDED,
        )
    return Step(
        StepKind.DONE,
        f"attempt {k + 1} started on {', '.join(obs.nodes)}, avoiding the suspect nodes, before the "
        f"exclusion list was set",
        DispositionReason.ALREADY_SATISFIED,
    )


def _plan_terminate(advice: AdviceState, obs: JobObservation | None, milestones: Sequence[Milestone]) -> Step:
    k = advice.attempt_index
    if obs is None:
        # slurmctld only forgets finished jobs, so a vanished job is not running.
        return _done(milestones, StepKind.CANCEL, "Slurm no longer knows the job, so it is not running")
    if obs.restart_count < k:
        return Step(
            StepKind.ABANDON,
            f"the job's restart count {obs.restart_count} is below attempt {k}: it is another submission",
            DispositionReason.JOB_NOT_FOUND,
        )
    if obs.restart_count > k + 1:
        return Step(
            StepKind.ABANDON,
            f"the job already moved past attempt {k + 1} (restart count {obs.restart_count})",
            DispositionReason.SUPERSEDED,
        )
    state = obs.state.upper()
    which = f"attempt {obs.restart_count}"
    if state in states.TERMINAL:
        return _done(milestones, StepKind.CANCEL, f"{which} has ended ({state})")
    if state == "COMPLETING":
        return Step(StepKind.WAIT, f"{which} is completing")
    if _succeeded(milestones, StepKind.CANCEL, advice.generation):
        return Step(
            StepKind.WAIT, f"our cancel succeeded but {which} is still {state}; waiting for a fresh observation"
        )
    # A successor (restart count k+1) is cancelled too, whoever requeued it: Slurm has no retry
    # limit of its own (RequeueExit loops forever), so the policy is enforced here.
    return Step(StepKind.CANCEL, f"cancel {which} ({state})")


def expected_effect(observation: JobObservation | None, step: Step) -> JobObservation | None:
    """How Slurm 22.05 changes the job when a command succeeds (NOTES §3); used for shadow plans."""
    if observation is None or not step.is_action:
        return observation
    if step.kind is StepKind.REQUEUE_HOLD:
        return replace(
            observation,
            state="PENDING",
            restart_count=observation.restart_count + 1,
            held=True,
            state_reason="JobHeldUser",
            state_description="job requeued in held state",
            priority=0,
            nodes=(),
        )
    if step.kind is StepKind.SET_EXCLUSIONS:
        return replace(observation, excluded_nodes=step.exclusions)
    if step.kind is StepKind.RELEASE:
        return replace(observation, held=False, state_reason="BeginTime", state_description=None, priority=1)
    return replace(observation, state="CANCELLED", held=False, nodes=())


def shadow_plan(
    advice: AdviceState,
    observation: JobObservation | None,
    *,
    now: dt.datetime,
    milestones: Sequence[Milestone] = (),
    max_steps: int = 8,
) -> list[Step]:
    """The whole sequence the controller would take from this observation (observe mode records it as SHADOW).

    Commands are assumed to succeed with their documented effect; the list ends with the
    first DONE, ABANDON or WAIT step.
    """
    steps: list[Step] = []
    recorded = list(milestones)
    for _ in range(max_steps):
        step = plan_next_step(advice, observation, now=now, milestones=recorded, authorized=True)
        steps.append(step)
        if not step.is_action:
            break
        recorded.append(Milestone(advice.generation, step.kind, "SUCCEEDED"))
        observation = expected_effect(observation, step)
    return steps
