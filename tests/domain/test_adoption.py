"""The adoption rule (pure): which ended attempts this installation observed."""

from __future__ import annotations

import datetime as dt

from app.domain.admission.adoption import adoption_reason

T = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC)


def reason(**kwargs: object) -> str | None:
    values: dict[str, object] = {
        "ended": True,
        "state": "FAILED",
        "first_seen_running_at": None,
        "end_time": T,
        "watching_since": None,
    }
    values.update(kwargs)
    return adoption_reason(**values)  # type: ignore[arg-type]


def test_a_live_attempt_is_never_adopted() -> None:
    assert reason(ended=False, state="RUNNING") is None


def test_an_end_after_we_saw_it_running_is_observed() -> None:
    assert reason(first_seen_running_at=T - dt.timedelta(minutes=5)) is None


def test_an_end_before_we_first_saw_it_running_is_adopted() -> None:
    text = reason(first_seen_running_at=T + dt.timedelta(minutes=5))
    assert text is not None and "before this installation first saw it running" in text


def test_first_seen_ended_on_the_first_look_is_adopted() -> None:
    text = reason(watching_since=None)
    assert text is not None and "first look" in text


def test_ran_and_ended_between_two_looks_is_observed() -> None:
    assert reason(watching_since=T - dt.timedelta(seconds=1)) is None
    assert reason(watching_since=T + dt.timedelta(seconds=1)) is None  # within Slurm's whole-second slack


def test_ended_before_the_previous_look_is_adopted() -> None:
    text = reason(watching_since=T + dt.timedelta(minutes=1))
    assert text is not None and "previous look" in text
