"""Slowdown arithmetic: the attempt's own baseline and a sustained drop, never a single slow sample."""

import datetime as dt

from app.domain.detection.slowdown import BASELINE_SAMPLES, SlowdownState, observe, rate_of

T = dt.datetime(2026, 11, 30, 2, 0, 0, tzinfo=dt.UTC)


def feed(state, values, seconds, *, attempt=1, duration=60.0):
    return observe(
        state,
        attempt_id=attempt,
        values=values,
        at=T + dt.timedelta(seconds=seconds),
        drop_ratio=0.7,
        duration=duration,
    )


def with_baseline(rate: float = 100.0) -> SlowdownState:
    state = SlowdownState()
    for i in range(BASELINE_SAMPLES):
        state, verdict = feed(state, {"tokens_per_s": rate + i}, i)
        assert verdict is None
    assert state.baseline == rate + BASELINE_SAMPLES // 2
    return state


def test_single_slow_sample_is_not_a_slowdown() -> None:
    state, verdict = feed(with_baseline(), {"tokens_per_s": 10.0}, 100, duration=0.0)
    assert verdict is None
    state, verdict = feed(state, {"tokens_per_s": 100.0}, 101, duration=0.0)
    assert verdict is None and state.slow_since is None


def test_sustained_drop_is_reported_once() -> None:
    state = with_baseline()
    verdicts = []
    for second in range(100, 200, 10):
        state, verdict = feed(state, {"tokens_per_s": 50.0}, second)
        verdicts.append(verdict)
    found = [v for v in verdicts if v is not None]
    assert len(found) == 1
    assert found[0].since == T + dt.timedelta(seconds=100) and found[0].ratio < 0.7
    assert verdicts.index(found[0]) == 6  # 60 s after the first slow sample, not earlier


def test_recovery_in_between_restarts_the_episode() -> None:
    state = with_baseline()
    for second, value in [(100, 50.0), (130, 50.0), (150, 99.0), (160, 50.0), (200, 50.0)]:
        state, verdict = feed(state, {"tokens_per_s": value}, second)
        assert verdict is None
    state, verdict = feed(state, {"tokens_per_s": 50.0}, 221)
    assert verdict is not None and verdict.since == T + dt.timedelta(seconds=160)


def test_a_new_attempt_gets_its_own_baseline() -> None:
    state = with_baseline()
    state, verdict = feed(state, {"tokens_per_s": 10.0}, 100, attempt=2)
    assert verdict is None and state.baseline is None and state.first == [10.0]


def test_iteration_time_is_inverted_and_metric_stays_fixed() -> None:
    assert rate_of({"iter_ms": 500.0}) == ("iter_ms", 2.0)
    assert rate_of({"tokens_per_s": 5.0, "iter_ms": 500.0}) == ("tokens_per_s", 5.0)
    assert rate_of({"iter_ms": 500.0}, "tokens_per_s") is None
    assert rate_of({"tokens_per_s": 0.0}) is None


def test_state_round_trips_through_json() -> None:
    state = with_baseline()
    assert SlowdownState.from_json(state.to_json()) == state
    assert SlowdownState.from_json(None) == SlowdownState()
