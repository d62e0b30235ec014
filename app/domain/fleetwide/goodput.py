"""Goodput: where the wall time of a run went, attempt by attempt (definitions in docs/goodput.md).

A run (one Slurm job and its attempts) is cut into consecutive intervals between points in time,
each clipped to be no earlier than the point before it, so the buckets always add up exactly to the
run's wall time (attempt 0's start to the last point):

    S  start of the attempt          P  first progress line        C  newest loadable checkpoint save
    F  the failure (root-cause line, last output of a hang, or the end)   A  Advice decided
    R  released (the controller's release; without one, the attempt's end)  S' next attempt's start

    S→P   startup (attempt 0) or restart_to_progress (a retry: lost to the previous failure)
    P→C   productive              C→F  lost_since_checkpoint       F→A  detection_delay
    A→R   decision_to_release     R→S' queue_wait
    a successful, still running or last unfailed attempt: P→end productive.

Without a progress line an attempt that failed and saved nothing made no progress (S→F is
startup/restart); one that saved a checkpoint, or did not fail, counts as productive from its
start. Without a loadable save during the failed attempt, everything it did is lost (C = P).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields

BUCKETS = (
    "productive",
    "startup",
    "restart_to_progress",
    "lost_since_checkpoint",
    "detection_delay",
    "decision_to_release",
    "queue_wait",
)
LOST = ("restart_to_progress", "lost_since_checkpoint", "detection_delay", "decision_to_release", "queue_wait")


@dataclass(frozen=True)
class AttemptTimes:
    """The points in time the goodput rules read for one attempt (None: not known)."""

    attempt_index: int
    start: dt.datetime | None
    end: dt.datetime | None  # None while it runs
    failed: bool = False
    first_progress: dt.datetime | None = None
    last_checkpoint: dt.datetime | None = None  # newest save during it that was not found unloadable
    failure_at: dt.datetime | None = None
    decided_at: dt.datetime | None = None
    released_at: dt.datetime | None = None


@dataclass
class Breakdown:
    """Seconds per bucket; `wall` is their sum."""

    productive: float = 0.0
    startup: float = 0.0
    restart_to_progress: float = 0.0
    lost_since_checkpoint: float = 0.0
    detection_delay: float = 0.0
    decision_to_release: float = 0.0
    queue_wait: float = 0.0

    @property
    def wall(self) -> float:
        return float(sum(getattr(self, name) for name in BUCKETS))

    @property
    def lost(self) -> float:
        return float(sum(getattr(self, name) for name in LOST))

    @property
    def effective_percent(self) -> float | None:
        """Productive share of the wall time, in percent (None for an empty run)."""
        wall = self.wall
        return round(100.0 * self.productive / wall, 2) if wall > 0 else None

    def count(self, bucket: str, seconds: float) -> None:
        """Add seconds to one bucket."""
        setattr(self, bucket, getattr(self, bucket) + seconds)

    def add(self, other: Breakdown) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def as_dict(self) -> dict[str, float | None]:
        out: dict[str, float | None] = {name: round(getattr(self, name), 3) for name in BUCKETS}
        out["wall"] = round(self.wall, 3)
        out["lost"] = round(self.lost, 3)
        out["effective_percent"] = self.effective_percent
        return out


@dataclass(frozen=True)
class Segment:
    """One interval of the run's time line, for the chart."""

    attempt_index: int
    bucket: str
    start: dt.datetime
    end: dt.datetime

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()


@dataclass
class RunGoodput:
    """A run's breakdown in total and per attempt, and its time line."""

    total: Breakdown = field(default_factory=Breakdown)
    attempts: dict[int, Breakdown] = field(default_factory=dict)
    segments: list[Segment] = field(default_factory=list)
    start: dt.datetime | None = None
    end: dt.datetime | None = None
    failures: int = 0


def run_goodput(attempts: Sequence[AttemptTimes], *, now: dt.datetime) -> RunGoodput:
    """Cut the run's wall time into the buckets; the buckets add up to `end - start` exactly."""
    ordered = sorted((a for a in attempts if a.start is not None), key=lambda a: a.attempt_index)
    out = RunGoodput()
    if not ordered:
        return out
    first_start = ordered[0].start
    assert first_start is not None
    cursor = first_start
    out.start = first_start

    def cut(index: int, bucket: str, until: dt.datetime | None) -> None:
        nonlocal cursor
        point = max(cursor, until) if until is not None else cursor
        if point > cursor:
            out.segments.append(Segment(index, bucket, cursor, point))
            seconds = (point - cursor).total_seconds()
            per = out.attempts.setdefault(index, Breakdown())
            per.count(bucket, seconds)
            out.total.count(bucket, seconds)
        cursor = point

    for position, attempt in enumerate(ordered):
        out.attempts.setdefault(attempt.attempt_index, Breakdown())
        following = ordered[position + 1] if position + 1 < len(ordered) else None
        index = attempt.attempt_index
        # before this attempt started: the wait after the previous attempt's release
        cut(ordered[position - 1].attempt_index if position else index, "queue_wait", attempt.start)
        end = attempt.end or now
        warmup = "startup" if position == 0 else "restart_to_progress"
        if not attempt.failed:
            cut(index, warmup, min(attempt.first_progress, end) if attempt.first_progress else None)
            cut(index, "productive", end)
            continue
        out.failures += 1
        failure = attempt.failure_at or end
        # no progress line: a recorded save still shows progress from the start; without either, none was made
        progressed = attempt.first_progress or (attempt.start if attempt.last_checkpoint else failure)
        cut(index, warmup, min(progressed, failure) if progressed else failure)
        cut(index, "productive", min(attempt.last_checkpoint, failure) if attempt.last_checkpoint else None)
        cut(index, "lost_since_checkpoint", failure)
        cut(index, "detection_delay", attempt.decided_at)
        # released, or (no release: observe mode, a person, the end of the run) until the attempt ended
        cut(index, "decision_to_release", attempt.released_at or attempt.end or (now if following is None else None))
    out.end = cursor
    return out


def merge(runs: Iterable[RunGoodput]) -> Breakdown:
    """The sum of several runs' breakdowns (a workflow, a cluster)."""
    total = Breakdown()
    for run in runs:
        total.add(run.total)
    return total
