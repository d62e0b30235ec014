"""Throughput-slowdown (straggler) arithmetic: the attempt's own baseline and a sustained drop.

Pure: samples in, state and verdicts out. A single slow sample never counts; the drop must hold
for every sample over `duration` seconds (and at least MIN_SLOW_SAMPLES samples).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any

BASELINE_SAMPLES = 5
MIN_SLOW_SAMPLES = 3
# Higher is better for all of these; iteration time is turned into iterations per second.
PREFERRED_METRICS: tuple[str, ...] = (
    "tokens_per_s",
    "samples_per_s",
    "tflops_per_gpu",
    "tflops",
    "it_per_s",
    "mfu_pct",
    "iter_ms",
)


def rate_of(values: dict[str, float], metric: str | None = None) -> tuple[str, float] | None:
    """(metric, higher-is-better value) of a throughput sample; `metric` pins the one to use."""
    for name in (metric,) if metric else PREFERRED_METRICS:
        value = values.get(name)
        if value is None or value != value or value <= 0:  # missing, NaN, or not a rate
            continue
        return name, (1000.0 / value if name == "iter_ms" else value)
    return None


@dataclass(frozen=True)
class SlowdownState:
    """Per attempt and file: which metric, the baseline, and since when it has been slow."""

    attempt_id: int | None = None
    metric: str | None = None
    first: list[float] = field(default_factory=list)
    baseline: float | None = None
    slow_since: str | None = None  # ISO time of the first slow sample of the current episode
    slow_samples: int = 0
    reported: str | None = None  # slow_since of the episode already reported

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> SlowdownState:
        if not data:
            return cls()
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


@dataclass(frozen=True)
class Slowdown:
    """A sustained drop: what was measured against what, since when."""

    metric: str
    baseline: float
    value: float
    ratio: float
    since: datetime
    samples: int


def observe(
    state: SlowdownState,
    *,
    attempt_id: int,
    values: dict[str, float],
    at: datetime,
    drop_ratio: float,
    duration: float,
    baseline_samples: int = BASELINE_SAMPLES,
) -> tuple[SlowdownState, Slowdown | None]:
    """Feed one sample; returns the new state and a Slowdown the first time an episode lasts `duration`."""
    if state.attempt_id != attempt_id:
        state = SlowdownState(attempt_id=attempt_id)  # a new attempt has a baseline of its own
    found = rate_of(values, state.metric)
    if found is None:
        return state, None
    metric, value = found
    if state.baseline is None:
        first = [*state.first, value]
        baseline = statistics.median(first) if len(first) >= baseline_samples else None
        return replace(state, metric=metric, first=first if baseline is None else [], baseline=baseline), None
    baseline = state.baseline
    if value >= drop_ratio * baseline:
        return replace(state, slow_since=None, slow_samples=0), None
    since = datetime.fromisoformat(state.slow_since) if state.slow_since else at
    count = state.slow_samples + 1
    state = replace(state, slow_since=since.isoformat(), slow_samples=count)
    if count >= MIN_SLOW_SAMPLES and (at - since).total_seconds() >= duration and state.reported != state.slow_since:
        verdict = Slowdown(
            metric=metric,
            baseline=baseline,
            value=value,
            ratio=value / baseline,
            since=since,
            samples=count,
        )
        return replace(state, reported=state.slow_since), verdict
    return state, None
