"""Accounting rows are matched to an attempt only within that attempt's own time window (issue 26 item 9).

After a lab's state was reset, job ids start again at 1 and jobcomp (which keeps no comment to tell
submissions apart) lists the older run's line for job 1 first: the new job 1 must never take its end.
"""

from __future__ import annotations

import datetime as dt

from app.slurm.accounting_window import TOLERANCE, attempt_record
from app.slurm.records import AccountingRecord

NOW = dt.datetime(2026, 12, 5, 12, 0, tzinfo=dt.UTC)


def row(state: str, start: dt.datetime | None, end: dt.datetime | None, *, attempt: int = 0) -> AccountingRecord:
    return AccountingRecord(
        job_id=1,
        attempt=attempt,
        state=state,
        exit_code=1 if state == "FAILED" else 0,
        exit_signal=None,
        nodes=("node1",),
        start=start,
        end=end,
        source="jobcomp",
    )


OLD_RUN = row("COMPLETED", NOW - dt.timedelta(minutes=30), NOW - dt.timedelta(minutes=14, seconds=41))


def test_a_reused_job_id_never_inherits_the_older_runs_end() -> None:
    started = NOW - dt.timedelta(seconds=20)
    own = row("FAILED", started, NOW - dt.timedelta(seconds=5), attempt=1)
    # jobcomp lists the older run first: by position, attempt 0 would be the older run's line
    assert attempt_record([OLD_RUN, own], started=started, first_seen=started) is own
    # its own line not yet written: nothing, rather than the older run's line
    assert attempt_record([OLD_RUN], started=started, first_seen=started) is None


def test_an_attempt_never_seen_running_takes_the_first_row_after_it_was_seen_pending() -> None:
    seen = NOW - dt.timedelta(seconds=30)
    first = row("FAILED", seen + dt.timedelta(seconds=3), seen + dt.timedelta(seconds=9), attempt=1)
    second = row("COMPLETED", seen + dt.timedelta(seconds=20), seen + dt.timedelta(seconds=28), attempt=2)
    assert attempt_record([OLD_RUN, second, first], started=None, first_seen=seen) is first
    assert attempt_record([OLD_RUN], started=None, first_seen=seen) is None
    # cancelled while pending: no start, its end after it was seen
    cancelled = row("CANCELLED", None, seen + dt.timedelta(seconds=4))
    assert attempt_record([OLD_RUN, cancelled], started=None, first_seen=seen) is cancelled


def test_the_start_must_agree_within_the_tolerance() -> None:
    started = NOW - dt.timedelta(minutes=2)
    close = row("FAILED", started + TOLERANCE, NOW, attempt=1)
    far = row("FAILED", started + TOLERANCE + dt.timedelta(seconds=1), NOW, attempt=1)
    assert attempt_record([close], started=started, first_seen=NOW) is close
    assert attempt_record([far], started=started, first_seen=NOW) is None


def test_no_row_gives_a_negative_duration_or_an_unended_state() -> None:
    started = NOW - dt.timedelta(seconds=10)
    backwards = row("FAILED", started, started - dt.timedelta(minutes=881 // 60))
    running = row("RUNNING", started, None)
    assert attempt_record([backwards, running], started=started, first_seen=started) is None
    assert attempt_record(None, started=started, first_seen=started) is None
