"""Retry rules: the effective retry limit and the early stop for runs that make no progress."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum


class FailureKind(StrEnum):
    """What made an attempt a failure candidate."""

    SCHEDULER_FAILURE = "SCHEDULER_FAILURE"  # the attempt ended in a Slurm state (FAILED, NODE_FAIL, ...)
    CRASH = "CRASH"  # a crash signature in the attempt's log
    NO_PROGRESS = "NO_PROGRESS"  # the hang detector fired
    SLOWDOWN = "SLOWDOWN"  # sustained throughput drop (straggler)


@dataclass(frozen=True)
class AttemptRecord:
    """One earlier attempt of the job, as the retry rules need to see it."""

    attempt_index: int
    failed: bool
    failure_kind: FailureKind | None = None
    # Checkpoint *saves* recorded during the attempt (loads are not progress).
    checkpoints_saved: int = 0
    latest_checkpoint_iteration: int | None = None
    implicated_nodes: tuple[str, ...] = ()
    advice_exclusions: tuple[str, ...] = ()
    # The attempt's root cause, for "the same application failure again" (app.domain.decision.rootcause).
    failure_category: str | None = None
    failure_outlook: str | None = None
    failure_signature: str | None = None
    failure_iteration: int | None = None


@dataclass(frozen=True)
class RetryLimit:
    """The effective retry limit and where it came from."""

    limit: int
    job_requested: int | None
    site_ceiling: int

    def describe(self) -> str:
        """E.g. "retry limit 1 (job asked 1, site ceiling 3)"."""
        asked = "job asked nothing" if self.job_requested is None else f"job asked {self.job_requested}"
        return f"retry limit {self.limit} ({asked}, site ceiling {self.site_ceiling})"

    def describe_reached(self) -> str:
        """E.g. "retry limit 1 reached (job asked 1, site ceiling 3)"."""
        return self.describe().replace(f"retry limit {self.limit} (", f"retry limit {self.limit} reached (", 1)


def effective_retry_limit(*, site_ceiling: int, job_max_requeue: int | None) -> RetryLimit:
    """min(site ceiling, the job's max_requeue_times); the site ceiling alone when the job gave none."""
    ceiling = max(0, site_ceiling)
    limit = ceiling if job_max_requeue is None else min(ceiling, max(0, job_max_requeue))
    return RetryLimit(limit=limit, job_requested=job_max_requeue, site_ceiling=site_ceiling)


def retry_limit_reached(limit: RetryLimit, failed_attempt_index: int) -> bool:
    """Attempt k has used k retries, so restarting it would be retry k+1."""
    return failed_attempt_index >= limit.limit


def made_progress(
    *, checkpoints_saved: int, latest_checkpoint_iteration: int | None, earlier: Sequence[AttemptRecord]
) -> bool:
    """A new checkpoint was saved: at least one save, past the best iteration saved before (when known)."""
    if checkpoints_saved <= 0:
        return False
    if latest_checkpoint_iteration is None:
        return True
    best_before = [
        a.latest_checkpoint_iteration
        for a in earlier
        if a.latest_checkpoint_iteration is not None and a.checkpoints_saved > 0
    ]
    return not best_before or latest_checkpoint_iteration > max(best_before)


def failures_without_progress(
    *, history: Sequence[AttemptRecord], checkpoints_saved: int, latest_checkpoint_iteration: int | None
) -> int:
    """Failures in a row, ending with the failed attempt, none of which saved a new checkpoint.

    ``history`` holds the attempts before the failed one, oldest first; the failed
    attempt's own checkpoints are passed separately. An earlier attempt that did not fail
    (requeued by a person, preempted) ends the row.
    """
    ordered = sorted(history, key=lambda a: a.attempt_index)
    if made_progress(
        checkpoints_saved=checkpoints_saved, latest_checkpoint_iteration=latest_checkpoint_iteration, earlier=ordered
    ):
        return 0
    count = 1
    for position in range(len(ordered) - 1, -1, -1):
        attempt = ordered[position]
        if not attempt.failed:
            break
        if made_progress(
            checkpoints_saved=attempt.checkpoints_saved,
            latest_checkpoint_iteration=attempt.latest_checkpoint_iteration,
            earlier=ordered[:position],
        ):
            break
        count += 1
    return count


def early_stop_applies(*, failures_in_a_row: int, early_stop_failures: int) -> bool:
    """Stop after N failures in a row without a new checkpoint; N = 0 disables the rule."""
    return early_stop_failures > 0 and failures_in_a_row >= early_stop_failures
