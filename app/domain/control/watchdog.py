"""The watchdog's choice: which held jobs to release so a dead controller fails open (never a hold we did not cause)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from app.domain.control.planner import HoldKind, JobObservation, Milestone, hold_kind, outstanding_requeue_hold

ADVICE_INACTIVE = "advice_inactive"
HELD_PAST_BOUND = "held_past_bound"


@dataclass(frozen=True)
class HeldJob:
    """A held job as observed, with when our requeue-hold placed the hold (None if we have no time)."""

    job_id: int
    observation: JobObservation
    held_since: dt.datetime | None = None


@dataclass(frozen=True)
class AdviceHoldState:
    """What our records say about the Advice behind a job's hold."""

    active: bool
    generation: int
    attempt_index: int
    # A REQUEUE_HOLD milestone (STARTED or SUCCEEDED) exists and no RELEASE of ours succeeded after it.
    caused_hold: bool


def advice_hold_state(
    *, active: bool, generation: int, attempt_index: int, milestones: Sequence[Milestone]
) -> tuple[AdviceHoldState, dt.datetime | None]:
    """Build the Advice side from stored milestones; also returns when our outstanding hold was placed."""
    outstanding = outstanding_requeue_hold(milestones)
    state = AdviceHoldState(
        active=active, generation=generation, attempt_index=attempt_index, caused_hold=outstanding is not None
    )
    return state, (outstanding.at if outstanding is not None else None)


@dataclass(frozen=True)
class WatchdogVerdict:
    """Release this job or leave it, and why."""

    job_id: int
    release: bool
    reason: str  # advice_inactive | held_past_bound | a short code for leaving it
    message: str


def judge_hold(job: HeldJob, advice: AdviceHoldState | None, *, now: dt.datetime, hold_bound: float) -> WatchdogVerdict:
    """Decide one held job: release only our own requeue-hold whose Advice is inactive or that outstayed the bound."""
    obs = job.observation
    kind = hold_kind(obs)
    if kind is HoldKind.NONE:
        return WatchdogVerdict(job.job_id, False, "not_held", "the job is not held")
    if advice is None or not advice.caused_hold:
        return WatchdogVerdict(
            job.job_id,
            False,
            "not_our_hold",
            f"held ({obs.state_reason or kind.value}) by a hold our controller did not place",
        )
    if kind is not HoldKind.REQUEUE_HOLD:
        # Someone re-held the job after us (scontrol hold -> JobHeldAdmin, uhold -> JobHeldUser).
        return WatchdogVerdict(
            job.job_id, False, "not_our_hold", f"the hold is now {obs.state_reason or kind.value}, not our requeue-hold"
        )
    if obs.restart_count != advice.attempt_index + 1:
        return WatchdogVerdict(
            job.job_id,
            False,
            "not_our_hold",
            f"restart count {obs.restart_count} is not the attempt our requeue created ({advice.attempt_index + 1})",
        )
    if not advice.active:
        return WatchdogVerdict(
            job.job_id,
            True,
            ADVICE_INACTIVE,
            f"held by our requeue but Advice generation {advice.generation} is no longer active",
        )
    if job.held_since is not None:
        held_for = (now - job.held_since).total_seconds()
        if held_for > hold_bound:
            return WatchdogVerdict(
                job.job_id,
                True,
                HELD_PAST_BOUND,
                f"held by our requeue for {held_for:.0f} s, past the {hold_bound:.0f} s bound",
            )
    return WatchdogVerdict(
        job.job_id, False, "within_bound", "held by our requeue while its Advice is still being reconciled"
    )


def jobs_to_release(
    held_jobs: Iterable[HeldJob],
    advice_by_job: Mapping[int, AdviceHoldState],
    *,
    now: dt.datetime,
    hold_bound: float,
) -> list[WatchdogVerdict]:
    """The verdicts that say release, in job-id order (the caller applies act/observe)."""
    verdicts = (judge_hold(job, advice_by_job.get(job.job_id), now=now, hold_bound=hold_bound) for job in held_jobs)
    return sorted((v for v in verdicts if v.release), key=lambda v: v.job_id)
