"""Range checks of what callers send at the edge: ids, positions, times and text (one place for every entry point).

Every API (GraphQL, REST, dashboard, SSE, subscriptions) reads integers, times, search text and cursors
through these functions, so a value that no column can hold is refused with a clear message (a 4xx)
before it reaches the database. Pure: imports nothing of ours.
"""

from __future__ import annotations

import datetime as dt

INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1
# Times outside this range are refused: every backend stores them, and converting to UTC cannot overflow.
MIN_TIME = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
MAX_TIME = dt.datetime(9000, 1, 1, tzinfo=dt.UTC)
MAX_SEARCH_LENGTH = 200  # the dashboard's cap of its search box; SQLite's LIKE pattern limit is 50,000 bytes
MAX_FILTER_LENGTH = 200  # cluster, environment, state, component, event type, ...
MAX_KEY_LENGTH = 256  # a workflow key (its column's size)
MAX_NODE_LENGTH = 256  # a node name (its column's size)
MAX_REASON_LENGTH = 2000  # an operator's veto reason
_ASCII_DIGITS = frozenset("0123456789")


class BoundsError(ValueError):
    """A value outside what the service can store or look up; the message says what is allowed."""


def is_ascii_digits(text: str) -> bool:
    """True for a non-empty string of 0-9 only (`'²'.isdigit()` is True, this is not)."""
    return bool(text) and all(ch in _ASCII_DIGITS for ch in text)


def check_int(value: int, name: str, *, minimum: int = 0, maximum: int = INT64_MAX) -> int:
    """`value` when minimum <= value <= maximum, else BoundsError naming the range."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise BoundsError(f"{name} must be an integer in {minimum}..{maximum}")
    return value


def parse_int(text: str | None, name: str, *, minimum: int = 0, maximum: int = INT64_MAX) -> int:
    """An integer written in ASCII digits only (no sign, no spaces around it, at most 19 digits) within the range.

    Surrounding spaces are refused, not stripped: `limit= 5` is not what a client that means 5 sends, and a value
    that reaches the database must be exactly the one that was checked. Callers reading text a person typed into a
    box strip it themselves."""
    raw = text or ""
    if not is_ascii_digits(raw) or len(raw) > 19:
        raise BoundsError(f"{name} must be an integer in {minimum}..{maximum} written in digits 0-9, got {raw[:20]!r}")
    return check_int(int(raw), name, minimum=minimum, maximum=maximum)


def parse_optional_int(text: str | None, name: str, *, minimum: int = 0, maximum: int = INT64_MAX) -> int | None:
    """parse_int, or None for an absent or empty value."""
    if not text:
        return None
    return parse_int(text, name, minimum=minimum, maximum=maximum)


def check_time(value: dt.datetime, name: str) -> dt.datetime:
    """A timezone-aware time between MIN_TIME and MAX_TIME, converted to UTC."""
    if value.tzinfo is None:
        raise BoundsError(f"{name} needs a time zone (e.g. 2025-01-01T00:00:00Z)")
    # Compare before converting: astimezone() itself overflows near year 1 and 9999.
    if not MIN_TIME <= value <= MAX_TIME:
        raise BoundsError(f"{name} must be between {MIN_TIME.date()} and {MAX_TIME.date()}")
    return value.astimezone(dt.UTC)


def check_text(value: str | None, name: str, *, maximum: int = MAX_FILTER_LENGTH) -> str | None:
    """Text of at most `maximum` characters without NUL (None stays None)."""
    if value is None:
        return None
    if len(value) > maximum:
        raise BoundsError(f"{name} is longer than {maximum} characters")
    if "\x00" in value:
        raise BoundsError(f"{name} must not contain NUL characters")
    return value


def check_search(value: str | None, name: str = "search") -> str | None:
    """Search text, capped like the dashboard's search box."""
    return check_text(value, name, maximum=MAX_SEARCH_LENGTH)
