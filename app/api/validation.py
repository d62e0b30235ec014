"""GraphQL arguments through app.domain.edge.bounds: a value out of range is a BAD_USER_INPUT error naming the limit."""

from __future__ import annotations

import datetime as dt

from app.api.errors import bad_input
from app.domain.edge import bounds


def text(value: str | None, name: str, *, maximum: int = bounds.MAX_FILTER_LENGTH) -> str | None:
    """A filter text (cluster, state, ...): at most `maximum` characters, no NUL."""
    try:
        return bounds.check_text(value, name, maximum=maximum)
    except bounds.BoundsError as exc:
        raise bad_input(str(exc)) from None


def search(value: str | None, name: str = "search") -> str | None:
    """Search text, capped like the dashboard's search box (bounds.MAX_SEARCH_LENGTH)."""
    try:
        return bounds.check_search(value, name)
    except bounds.BoundsError as exc:
        raise bad_input(str(exc)) from None


def time(value: dt.datetime | None, name: str) -> dt.datetime | None:
    """A timezone-aware time within bounds.MIN_TIME..MAX_TIME."""
    if value is None:
        return None
    try:
        return bounds.check_time(value, name)
    except bounds.BoundsError as exc:
        raise bad_input(str(exc)) from None


def position(value: str | None, name: str = "after") -> int | None:
    """A change-feed position (digits 0-9, within int64)."""
    if value is None:
        return None
    try:
        return bounds.parse_int(value, name)
    except bounds.BoundsError:
        raise bad_input(f"{name} must be a position from a previous update (digits), got {value[:30]!r}") from None
