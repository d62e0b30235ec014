"""Source timestamps, attempt labels and event identity of single lines."""

from datetime import UTC, datetime, timedelta, timezone

import pytest

from app.domain.detection.line_facts import attempt_label, decode_line, event_identity, parse_timestamp

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
UTC = UTC


@pytest.mark.parametrize(
    "line,expected",
    [
        ("2026-11-30T02:34:15Z train step", datetime(2026, 11, 30, 2, 34, 15, tzinfo=UTC)),
        (
            "2026-11-30T02:34:15.250+02:00 x",
            datetime(2026, 11, 30, 2, 34, 15, 250000, tzinfo=timezone(timedelta(hours=2))),
        ),
        (" [2026-11-30 02:34:15] iteration 1/ 2 |", datetime(2026, 11, 30, 2, 34, 15, tzinfo=UTC)),
        ("2026-11-30 02:34:15,123 - INFO - x", datetime(2026, 11, 30, 2, 34, 15, 123000, tzinfo=UTC)),
        (
            "[rank0]:[W1130 02:34:15.123456 ProcessGroupNCCL.cpp:1] x",
            datetime(2026, 11, 30, 2, 34, 15, 123456, tzinfo=UTC),
        ),
        ("Nov 30 02:34:15 node12 kernel: NVRM: Xid", datetime(2026, 11, 30, 2, 34, 15, tzinfo=UTC)),
        ("Nov  3 02:34:15 node12 kernel: x", datetime(2026, 11, 3, 2, 34, 15, tzinfo=UTC)),
    ],
)
def test_timestamp_formats(line, expected):
    assert parse_timestamp(line, now=NOW) == expected


def test_yearless_dates_cross_new_year():
    new_year = datetime(2027, 1, 1, 0, 5, tzinfo=UTC)
    assert parse_timestamp("Dec 31 23:59:00 n1 kernel: x", now=new_year).year == 2026
    assert parse_timestamp("[W0101 00:01:00.0 x]", now=new_year).year == 2027


def test_naive_timestamps_take_the_default_zone():
    tz = timezone(timedelta(hours=-5))
    assert parse_timestamp("2026-11-30 02:34:15 x", now=NOW, default_tz=tz).utcoffset() == timedelta(hours=-5)


@pytest.mark.parametrize("line", ["no time here", "2026-13-45 99:99:99 bad", "iteration 100/ 200", ""])
def test_lines_without_a_valid_timestamp(line):
    assert parse_timestamp(line, now=NOW) is None


@pytest.mark.parametrize(
    "line,expected",
    [
        ("slurm_job_attempt=2 iteration 5", 2),
        ("slurm_job_attempt: 3 | loss 1", 3),
        ('{"msg": "x", "slurm_job_attempt": 4}', 4),
        ("no label", None),
    ],
)
def test_attempt_label(line, expected):
    assert attempt_label(line) == expected


def test_event_identity_is_deterministic_and_sensitive():
    a = event_identity("/log", 7, 100, b"Segmentation fault")
    assert a == event_identity("/log", 7, 100, b"Segmentation fault") and len(a) == 32
    assert (
        len(
            {
                a,
                event_identity("/log", 8, 100, b"Segmentation fault"),
                event_identity("/log", 7, 101, b"Segmentation fault"),
                event_identity("/log", 7, 100, b"Segmentation fault!"),
                event_identity("/log2", 7, 100, b"Segmentation fault"),
            }
        )
        == 5
    )


def test_decode_line_replaces_invalid_utf8():
    assert decode_line(b"bad \xff\xfe bytes\r") == "bad \ufffd\ufffd bytes"
