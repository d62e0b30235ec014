"""The one backoff formula and the UTC timestamp format."""

import datetime as dt
import random

from app.domain.control.backoff import exponential, jittered
from app.domain.edge.timefmt import iso_utc, iso_utc_or_none


def test_exponential_backoff_doubles_up_to_the_cap() -> None:
    assert [exponential(n, base=1.0, cap=60.0) for n in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert exponential(-3, base=2.0, cap=60.0) == 2.0
    assert exponential(10_000, base=1.0, cap=1e9) == 1024.0  # doublings are bounded


def test_jitter_stays_within_a_quarter() -> None:
    rng = random.Random(7)
    assert all(7.5 <= jittered(10.0, rng=rng) <= 12.5 for _ in range(200))


def test_iso_utc() -> None:
    cet = dt.timezone(dt.timedelta(hours=1))
    assert iso_utc(dt.datetime(2026, 12, 1, 10, 0, tzinfo=cet)) == "2026-12-01T09:00:00Z"
    assert iso_utc(dt.datetime(2026, 12, 1, 9, 0)) == "2026-12-01T09:00:00Z"  # naive: taken as UTC
    assert iso_utc_or_none(None) is None
