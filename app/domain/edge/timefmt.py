"""The one way a timestamp is written for machines: ISO 8601 in UTC with a `Z`."""

from __future__ import annotations

import datetime as dt


def iso_utc(value: dt.datetime) -> str:
    """`2026-12-01T09:00:00Z` (microseconds kept when present); a naive value is taken as UTC."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def iso_utc_or_none(value: dt.datetime | None) -> str | None:
    """`iso_utc`, or None for no time."""
    return iso_utc(value) if value is not None else None
