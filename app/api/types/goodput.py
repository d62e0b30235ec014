"""GraphQL types of goodput: where the wall time of runs went, per attempt, job, workflow and cluster."""

from __future__ import annotations

import strawberry

from app.domain.fleetwide.goodput import Breakdown
from app.goodput.queries import GoodputReport


@strawberry.type(
    description="Seconds of wall time per bucket (docs/goodput.md); the buckets add up to wallSeconds exactly."
)
class GoodputBreakdown:
    productive_seconds: float = strawberry.field(
        description="First progress line -> newest loadable checkpoint (failed attempts) or -> the end (others)."
    )
    startup_seconds: float = strawberry.field(description="Attempt 0's start -> its first progress line.")
    restart_to_progress_seconds: float = strawberry.field(description="A retry's start -> its first progress line.")
    lost_since_checkpoint_seconds: float = strawberry.field(
        description="Newest loadable checkpoint -> the failure: work that is redone."
    )
    detection_delay_seconds: float = strawberry.field(description="The failure -> the Advice (detection and decision).")
    decision_to_release_seconds: float = strawberry.field(
        description="The Advice -> the release of the retry (or the attempt's end without a release)."
    )
    queue_wait_seconds: float = strawberry.field(description="Release -> the next attempt's start (Slurm queue).")
    wall_seconds: float = strawberry.field(description="The sum of the buckets: first start -> last point.")
    lost_seconds: float = strawberry.field(
        description="Every bucket caused by a failure (all but productive, startup)."
    )
    effective_training_percent: float | None = strawberry.field(
        description="productiveSeconds / wallSeconds x 100; null for no wall time."
    )


def breakdown(value: Breakdown) -> GoodputBreakdown:
    """The GraphQL view of a domain breakdown."""
    return GoodputBreakdown(
        productive_seconds=round(value.productive, 3),
        startup_seconds=round(value.startup, 3),
        restart_to_progress_seconds=round(value.restart_to_progress, 3),
        lost_since_checkpoint_seconds=round(value.lost_since_checkpoint, 3),
        detection_delay_seconds=round(value.detection_delay, 3),
        decision_to_release_seconds=round(value.decision_to_release, 3),
        queue_wait_seconds=round(value.queue_wait, 3),
        wall_seconds=round(value.wall, 3),
        lost_seconds=round(value.lost, 3),
        effective_training_percent=value.effective_percent,
    )


@strawberry.type(description="One attempt's share of its run (the loss of a failure is booked on the failed attempt).")
class AttemptGoodput:
    job_id: int = strawberry.field(description="Slurm job id.")
    attempt_index: int
    goodput: GoodputBreakdown


@strawberry.type(description="Goodput of a set of runs (a workflow's jobs, or a cluster's in a time window).")
class Goodput:
    total: GoodputBreakdown
    runs: int = strawberry.field(description="Jobs counted.")
    failures: int = strawberry.field(description="Failed attempts counted.")
    truncated: bool = strawberry.field(description="Only the newest 2000 jobs were counted.")
    attempts: list[AttemptGoodput] = strawberry.field(description="Per attempt, by job then attempt index.")


def goodput_of(report: GoodputReport) -> Goodput:
    """The GraphQL view of a goodput report."""
    return Goodput(
        total=breakdown(report.total),
        runs=len(report.jobs),
        failures=report.failures,
        truncated=report.truncated,
        attempts=[
            AttemptGoodput(job_id=job.slurm_job_id, attempt_index=index, goodput=breakdown(value))
            for job in report.jobs
            for index, value in sorted(job.run.attempts.items())
        ],
    )
