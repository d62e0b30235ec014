"""Attempt association (SPEC §4.2) as a pure decision: label, window, or wait — never the newest attempt."""

import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from app.domain.detection import association as assoc
from app.domain.detection.association import (
    AttemptWindow,
    attribute_shared_event,
    job_file_name,
    next_retry_delay,
    written_after_end,
)

T = dt.datetime(2026, 11, 30, 2, 0, 0, tzinfo=dt.UTC)


def at(seconds: float) -> dt.datetime:
    return T + dt.timedelta(seconds=seconds)


W0 = AttemptWindow(0, at(0), at(100))
W1 = AttemptWindow(1, at(200), None)
NOW = at(300)


def test_label_decides_even_against_the_timestamp() -> None:
    decision = attribute_shared_event(label=0, source_time=at(250), windows=[W0, W1], now=NOW)
    assert (decision.attempt_index, decision.rule) == (0, "label")


def test_label_of_an_unregistered_attempt_waits() -> None:
    decision = attribute_shared_event(label=2, source_time=at(250), windows=[W0, W1], now=NOW)
    assert not decision.decided and decision.reason == assoc.LABEL_NOT_REGISTERED


def test_timestamp_inside_exactly_one_window() -> None:
    assert attribute_shared_event(label=None, source_time=at(50), windows=[W0, W1], now=NOW).attempt_index == 0
    assert attribute_shared_event(label=None, source_time=at(299), windows=[W0, W1], now=NOW).attempt_index == 1


def test_end_second_is_inclusive_because_slurm_times_are_whole_seconds() -> None:
    assert attribute_shared_event(label=None, source_time=at(100.7), windows=[W0, W1], now=NOW).attempt_index == 0
    assert not attribute_shared_event(label=None, source_time=at(101), windows=[W0, W1], now=NOW).decided


def test_gap_between_attempts_waits_instead_of_taking_the_newest() -> None:
    decision = attribute_shared_event(label=None, source_time=at(150), windows=[W0, W1], now=NOW)
    assert decision.attempt_index is None and decision.reason == assoc.OUTSIDE_WINDOWS


def test_after_the_last_window_waits_for_registration() -> None:
    ended = AttemptWindow(1, at(200), at(250))
    decision = attribute_shared_event(label=None, source_time=at(280), windows=[W0, ended], now=NOW)
    assert decision.reason == assoc.OUTSIDE_WINDOWS


def test_overlapping_windows_are_ambiguous() -> None:
    still_open = AttemptWindow(0, at(0), None)
    decision = attribute_shared_event(label=None, source_time=at(250), windows=[still_open, W1], now=NOW)
    assert decision.reason == assoc.AMBIGUOUS


def test_no_timestamp_and_no_label_waits() -> None:
    assert attribute_shared_event(label=None, source_time=None, windows=[W0, W1], now=NOW).reason == assoc.NO_TIMESTAMP


def test_unstarted_attempt_has_no_window() -> None:
    pending = AttemptWindow(1, None, None)
    assert (
        attribute_shared_event(label=None, source_time=at(250), windows=[W0, pending], now=NOW).reason
        == assoc.OUTSIDE_WINDOWS
    )
    assert attribute_shared_event(label=None, source_time=at(250), windows=[], now=NOW).reason == assoc.NO_ATTEMPTS


def test_open_window_ends_now() -> None:
    assert not attribute_shared_event(label=None, source_time=at(400), windows=[W0, W1], now=NOW).decided


windows_strategy = st.lists(
    st.tuples(st.integers(0, 1000), st.integers(0, 500), st.booleans()),
    min_size=0,
    max_size=5,
).map(
    lambda spec: [
        AttemptWindow(i, at(s), None if open_ else at(s + length)) for i, (s, length, open_) in enumerate(spec)
    ]
)


@given(windows=windows_strategy, label=st.none() | st.integers(0, 6), stamp=st.none() | st.integers(-100, 2000))
def test_decisions_only_name_registered_attempts_by_a_stated_rule(windows, label, stamp) -> None:
    now = at(1500)
    decision = attribute_shared_event(
        label=label, source_time=None if stamp is None else at(stamp), windows=windows, now=now
    )
    if decision.decided:
        assert decision.attempt_index in {w.index for w in windows}
        if decision.rule == "label":
            assert decision.attempt_index == label
        else:
            assert label is None and decision.rule == "window"
            inside = [
                w
                for w in windows
                if w.start is not None and w.start <= at(stamp) < (w.end or now) + dt.timedelta(seconds=1)
            ]
            assert [w.index for w in inside] == [decision.attempt_index]
    else:
        assert decision.reason in {
            assoc.LABEL_NOT_REGISTERED,
            assoc.NO_TIMESTAMP,
            assoc.OUTSIDE_WINDOWS,
            assoc.AMBIGUOUS,
            assoc.NO_ATTEMPTS,
        }


def test_redelivery_is_bounded_to_about_two_minutes() -> None:
    delays = []
    tries = 0
    while (delay := next_retry_delay(tries)) is not None:
        delays.append(delay)
        tries += 1
    assert len(delays) == 6 and 100 <= sum(delays) <= 150
    assert delays == sorted(delays)
    assert next_retry_delay(-1) is None


def test_written_after_end() -> None:
    assert written_after_end(source_time=at(102), end=at(100))
    assert not written_after_end(source_time=at(100.5), end=at(100))
    assert not written_after_end(source_time=None, end=at(100))
    assert not written_after_end(source_time=at(500), end=None)


def test_log_directory_naming_convention() -> None:
    ids = frozenset({1234, 77})
    assert job_file_name("train-1234-0.log", ids) == (1234, 0)
    assert job_file_name("train-1234_3.out", ids) == (1234, 3)
    assert job_file_name("run-1234-attempt2.txt", ids) == (1234, 2)
    assert job_file_name("train-1234-1-rank0.log", ids) == (1234, 1)
    assert job_file_name("slurm-1234.out", ids) == (1234, None)
    assert job_file_name("train-1234-2026-11-30.log", ids) == (1234, None)  # a date is not an attempt
    assert job_file_name("train-12345-0.log", ids) is None  # the id must be a whole number
    assert job_file_name("notes.txt", ids) is None
    assert job_file_name("x-77.log", ids) == (77, None)
