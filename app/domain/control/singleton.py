"""`auto_resume_mode: singleton_dependency`: the retry is a held twin job, released when the first one fails.

The predecessor product (NVIDIA Mission Control Autonomous Job Recovery) defines it: the user submits
the job and a *twin* with the same name and `--dependency=singleton`, held (`sbatch --hold`). When the
first fails, recovery releases the twin (with the same policy, exclusions and limits) instead of
requeueing the first; Slurm's singleton dependency keeps the twin waiting until no other job of that
name and user runs. Pure rules: which job is the twin, and the controller's next step.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from app.domain.control.planner import (
    AdviceState,
    DispositionReason,
    Milestone,
    Step,
    StepKind,
    idempotency_key,
)

MODE = "singleton_dependency"
# The first job still executes (a hang): it must end before Slurm starts its singleton twin.
RUNNING = frozenset({"RUNNING", "CONFIGURING", "SUSPENDED", "STOPPED"})


@dataclass(frozen=True)
class JobView:
    """What the twin rules read of one Slurm job (squeue --json)."""

    job_id: int
    name: str
    user: str
    state: str
    held: bool
    dependency: str | None
    comment: str
    excluded_nodes: tuple[str, ...] = ()
    partition: str = ""


def is_twin(candidate: JobView, first: JobView) -> bool:
    """A held, pending job of the same name and user with a singleton dependency and the same APS comment."""
    return (
        candidate.job_id != first.job_id
        and candidate.name == first.name
        and candidate.user == first.user
        and candidate.comment == first.comment
        and candidate.state.upper() == "PENDING"
        and candidate.held
        and "singleton" in (candidate.dependency or "").lower()
    )


def choose_twin(first: JobView, jobs: Iterable[JobView]) -> JobView | None:
    """The oldest held twin of the failed job (the one submitted first), or None."""
    twins = sorted((job for job in jobs if is_twin(job, first)), key=lambda job: job.job_id)
    return twins[0] if twins else None


@dataclass(frozen=True)
class TwinStep:
    """The planner's answer and the Slurm job the command names (the first job for cancel, else the twin)."""

    step: Step
    target: int | None = None


def _succeeded(milestones: Sequence[Milestone], generation: int, kind: StepKind) -> bool:
    return any(m.generation == generation and m.step is kind and m.status == "SUCCEEDED" for m in milestones)


def _intended(milestones: Sequence[Milestone], generation: int, kind: StepKind) -> bool:
    return any(m.generation == generation and m.step is kind for m in milestones)


def _keyed(advice: AdviceState, step: Step) -> Step:
    return Step(
        step.kind,
        step.message,
        step.reason,
        idempotency_key(advice.advice_id, advice.generation, step.kind),
        step.exclusions,
    )


def plan_twin_step(
    advice: AdviceState,
    first: JobView | None,
    twin: JobView | None,
    *,
    twin_id: int | None,
    now: dt.datetime,
    milestones: Sequence[Milestone] = (),
) -> TwinStep:
    """Next step of a singleton RESTART: stop a still-running first job, exclude nodes on the twin, release it."""
    expired = advice.expires_at is not None and now > advice.expires_at
    if twin_id is None:
        if expired:
            return TwinStep(
                Step(StepKind.ABANDON, "Advice expired and no held twin appeared", DispositionReason.ADVICE_EXPIRED)
            )
        return TwinStep(
            Step(
                StepKind.WAIT,
                "no held twin: submit a job with the same name, the same comment, --dependency=singleton and --hold",
            )
        )
    if twin is None:
        if _succeeded(milestones, advice.generation, StepKind.RELEASE):
            return TwinStep(
                Step(StepKind.DONE, f"twin job {twin_id} was released and has left squeue", _reason(milestones, advice))
            )
        return TwinStep(
            Step(StepKind.ABANDON, f"the held twin job {twin_id} is gone from Slurm", DispositionReason.JOB_NOT_FOUND)
        )
    first_running = first is not None and first.state.upper() in RUNNING
    wanted = set(advice.exclusions)
    missing = wanted - set(twin.excluded_nodes)
    if first_running and not _succeeded(milestones, advice.generation, StepKind.CANCEL):
        step = Step(StepKind.CANCEL, f"cancel job {first.job_id if first else ''} so its singleton twin can start")
        return _ready(advice, step, first.job_id if first else None, expired)
    if twin.held:
        if missing:
            full = tuple(sorted(set(twin.excluded_nodes) | wanted))
            step = Step(
                StepKind.SET_EXCLUSIONS,
                f"exclude {', '.join(sorted(missing))} on twin job {twin.job_id}",
                exclusions=full,
            )
            return _ready(advice, step, twin.job_id, expired)
        if _succeeded(milestones, advice.generation, StepKind.RELEASE):
            return TwinStep(
                Step(StepKind.WAIT, f"our release of twin job {twin.job_id} succeeded; Slurm still holds it")
            )
        with_nodes = f" with {', '.join(sorted(wanted))} excluded" if wanted else ""
        return _ready(
            advice, Step(StepKind.RELEASE, f"release twin job {twin.job_id}{with_nodes}"), twin.job_id, expired
        )
    if missing:
        return TwinStep(
            Step(
                StepKind.ABANDON,
                f"twin job {twin.job_id} is unheld ({twin.state}) without the exclusions {', '.join(sorted(missing))}",
                DispositionReason.SUPERSEDED,
            )
        )
    return TwinStep(
        Step(
            StepKind.DONE,
            f"twin job {twin.job_id} is unheld ({twin.state})"
            + (f" with {', '.join(sorted(wanted))} excluded" if wanted else ""),
            _reason(milestones, advice),
        )
    )


def _reason(milestones: Sequence[Milestone], advice: AdviceState) -> DispositionReason:
    if _intended(milestones, advice.generation, StepKind.RELEASE):
        return DispositionReason.DESIRED_STATE_OBSERVED
    return DispositionReason.ALREADY_SATISFIED


def _ready(advice: AdviceState, step: Step, target: int | None, expired: bool) -> TwinStep:
    if expired:
        return TwinStep(
            Step(
                StepKind.ABANDON,
                f"Advice expired before it converged (next step would have been: {step.message})",
                DispositionReason.ADVICE_EXPIRED,
            )
        )
    return TwinStep(_keyed(advice, step), target)


def twin_shadow_plan(advice: AdviceState, first: JobView | None, twin: JobView | None) -> list[tuple[Step, int]]:
    """Every command observe mode would send, with its target job, in order."""
    plan: list[tuple[Step, int]] = []
    if first is not None and first.state.upper() in RUNNING:
        plan.append((Step(StepKind.CANCEL, f"cancel job {first.job_id}"), first.job_id))
    if twin is not None:
        missing = set(advice.exclusions) - set(twin.excluded_nodes)
        if missing:
            full = tuple(sorted(set(twin.excluded_nodes) | set(advice.exclusions)))
            plan.append((Step(StepKind.SET_EXCLUSIONS, "exclude on the twin", exclusions=full), twin.job_id))
        if twin.held:
            plan.append((Step(StepKind.RELEASE, f"release twin job {twin.job_id}"), twin.job_id))
    return plan
