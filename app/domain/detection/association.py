"""Which attempt a log event belongs to (SPEC §4.2): by path, by label, by source time — or wait.

Pure: the caller passes the attempts it knows and the current time. The rule never guesses:
missing or ambiguous evidence means "wait" (bounded redelivery), never "the newest attempt".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

# Slurm reports start/end times in whole seconds; a line stamped 12:00:00.7 belongs to an attempt
# that Slurm says ended at 12:00:00.
END_RESOLUTION = timedelta(seconds=1)
# Bounded redelivery of undecided events: waits before try 1..6 (2+4+...+64 s ≈ 2 minutes in all).
RETRY_DELAYS: tuple[float, ...] = (2.0, 4.0, 8.0, 16.0, 32.0, 64.0)

# Reasons an event waits (and, once the bound runs out, is dropped with).
LABEL_NOT_REGISTERED = "label_not_registered"
NO_TIMESTAMP = "no_timestamp"
OUTSIDE_WINDOWS = "outside_windows"
AMBIGUOUS = "ambiguous"
NO_ATTEMPTS = "no_attempts"
AFTER_ATTEMPT_END = "after_attempt_end"


@dataclass(frozen=True)
class AttemptWindow:
    """One recorded attempt's execution window (start unknown while it has not started)."""

    index: int
    start: datetime | None
    end: datetime | None  # None while it runs: the window reaches "now"


@dataclass(frozen=True)
class Attribution:
    """The decision for one event: an attempt index with the rule that chose it, or why to wait."""

    attempt_index: int | None
    rule: str  # "label" | "window" | "wait"
    reason: str = ""

    @property
    def decided(self) -> bool:
        return self.attempt_index is not None


def _contains(window: AttemptWindow, at: datetime, now: datetime) -> bool:
    if window.start is None or at < window.start:
        return False
    end = window.end if window.end is not None else now
    return at < end + END_RESOLUTION


def attribute_shared_event(
    *, label: int | None, source_time: datetime | None, windows: list[AttemptWindow], now: datetime
) -> Attribution:
    """Attribute an event of a shared log path: a `slurm_job_attempt` label decides, else the
    source timestamp must fall inside exactly one recorded attempt's [start, end or now] window."""
    known = {w.index for w in windows}
    if label is not None:
        if label in known:
            return Attribution(label, "label")
        return Attribution(None, "wait", LABEL_NOT_REGISTERED)
    if source_time is None:
        return Attribution(None, "wait", NO_TIMESTAMP)
    if not windows:
        return Attribution(None, "wait", NO_ATTEMPTS)
    inside = [w.index for w in windows if _contains(w, source_time, now)]
    if len(inside) == 1:
        return Attribution(inside[0], "window")
    return Attribution(None, "wait", AMBIGUOUS if inside else OUTSIDE_WINDOWS)


def written_after_end(*, source_time: datetime | None, end: datetime | None) -> bool:
    """True when a line in an ended attempt's own file says it was written after that attempt ended
    (another execution reused the path): such a line is not that attempt's evidence."""
    return source_time is not None and end is not None and source_time >= end + END_RESOLUTION


def next_retry_delay(tries: int) -> float | None:
    """Seconds until the next try of an undecided event after `tries` failed tries; None: give up."""
    if tries < 0 or tries >= len(RETRY_DELAYS):
        return None
    return RETRY_DELAYS[tries]


_NUMBER = re.compile(r"(?<!\d)\d+(?!\d)")
_ATTEMPT_SUFFIX = re.compile(r"[-_.](?:attempt)?(\d{1,3})(?!\d)(?![-_.]\d)")


def job_file_name(name: str, job_ids: set[int] | frozenset[int]) -> tuple[int, int | None] | None:
    """Which running job (and attempt) a file in a log directory belongs to, by its name.

    Convention: the name contains the Slurm job id as a whole number; when the id is directly
    followed by `-N`, `_N` or `.N` (also `-attemptN`; N of 1–3 digits), N is the attempt index —
    e.g. `train-1234-0.log` is attempt 0 of job 1234, `train-1234.log` is job 1234 without an
    attempt (its lines are then attributed like a shared file's). The first job id in the name wins.
    """
    for match in _NUMBER.finditer(name):
        job_id = int(match.group(0))
        if job_id in job_ids:
            suffix = _ATTEMPT_SUFFIX.match(name, match.end())
            return job_id, (int(suffix.group(1)) if suffix else None)
    return None
