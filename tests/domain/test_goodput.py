"""Goodput buckets: each interval lands in one bucket and together they are the run's wall time."""

from __future__ import annotations

import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from app.domain.fleetwide.goodput import AttemptTimes, run_goodput

T0 = dt.datetime(2026, 12, 1, 10, tzinfo=dt.UTC)


def at(seconds: float | None) -> dt.datetime | None:
    return None if seconds is None else T0 + dt.timedelta(seconds=seconds)


def test_a_crash_and_a_resumed_retry() -> None:
    crashed = AttemptTimes(
        0,
        at(0),
        at(1000),
        failed=True,
        first_progress=at(100),
        last_checkpoint=at(800),
        failure_at=at(990),
        decided_at=at(1002),
        released_at=at(1003),
    )
    retry = AttemptTimes(1, at(1060), at(2000), first_progress=at(1120))
    run = run_goodput([retry, crashed], now=at(5000) or T0)
    total = run.total.as_dict()
    assert total == {
        "productive": 700.0 + 880.0,
        "startup": 100.0,
        "restart_to_progress": 60.0,
        "lost_since_checkpoint": 190.0,
        "detection_delay": 12.0,
        "decision_to_release": 1.0,
        "queue_wait": 57.0,
        "wall": 2000.0,
        "lost": 320.0,
        "effective_percent": 79.0,
    }
    assert run.attempts[0].queue_wait == 57.0 and run.attempts[1].restart_to_progress == 60.0
    assert run.failures == 1 and (run.end - run.start).total_seconds() == 2000.0  # type: ignore[operator]


def test_failed_without_progress_or_checkpoint_loses_everything() -> None:
    run = run_goodput([AttemptTimes(0, at(0), at(50), failed=True, decided_at=at(52))], now=at(60) or T0)
    assert run.total.productive == 0 and run.total.startup == 50 and run.total.detection_delay == 2
    assert run.total.wall == 52


def test_a_hang_still_running_in_observe_mode_counts_until_now() -> None:
    hung = AttemptTimes(0, at(0), None, failed=True, first_progress=at(10), failure_at=at(100), decided_at=at(1100))
    run = run_goodput([hung], now=at(1500) or T0)
    assert run.total.lost_since_checkpoint == 90 and run.total.detection_delay == 1000
    assert run.total.decision_to_release == 400 and run.total.wall == 1500


points = st.one_of(st.none(), st.floats(min_value=0, max_value=10_000, allow_nan=False))


@given(st.lists(st.tuples(points, points, st.booleans(), points, points, points, points, points), max_size=5))
def test_buckets_always_add_up_to_the_wall_time(raw: list[tuple]) -> None:
    attempts = [
        AttemptTimes(
            i,
            at(s),
            at(e),
            failed=f,
            first_progress=at(p),
            last_checkpoint=at(c),
            failure_at=at(x),
            decided_at=at(d),
            released_at=at(e + 1) if e is not None else None,
        )
        for i, (s, e, f, p, c, x, d, _) in enumerate(raw)
    ]
    run = run_goodput(attempts, now=at(20_000) or T0)
    if run.start is None:
        assert run.total.wall == 0
        return
    assert run.end is not None
    assert abs(run.total.wall - (run.end - run.start).total_seconds()) < 1e-6
    assert all(getattr(run.total, b) >= 0 for b in ("productive", "queue_wait", "detection_delay"))
    assert abs(sum(seg.seconds for seg in run.segments) - run.total.wall) < 1e-6
