"""Opaque keyset cursors: round trips of every sort-key type, and a clear refusal of anything else."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from app.domain.edge.cursor import CursorError, decode_cursor, encode_cursor


def test_sort_keys_round_trip() -> None:
    at = dt.datetime(2026, 12, 1, 9, 0, 0, 123456, tzinfo=dt.UTC)
    cursor = encode_cursor("audit", (at, 42))
    assert "audit" not in cursor  # opaque
    assert decode_cursor("audit", cursor, 2) == (at, 42)
    assert decode_cursor("jobs", encode_cursor("jobs", ["x", None]), 2) == ("x", None)


def test_a_cursor_of_another_list_is_refused() -> None:
    with pytest.raises(CursorError, match="another list"):
        decode_cursor("jobs", encode_cursor("audit", (1,)), 1)


@pytest.mark.parametrize("bad", ["", "not-a-cursor", "x" * 5000, encode_cursor("audit", (1, 2))])
def test_garbage_and_wrong_arity_are_refused(bad: str) -> None:
    with pytest.raises(CursorError):
        decode_cursor("audit", bad, 1)


def test_cursor_text_is_the_json_encoding_of_the_key() -> None:
    """The hand-built JSON of the usual key types is byte for byte what json.dumps wrote (old cursors stay valid)."""
    import base64
    import json

    from app.domain.edge.cursor import _PREFIX, _encode_value, encode_cursor

    keys: list[tuple[str, list[Any]]] = [
        ("audit", [dt.datetime(2025, 1, 1, tzinfo=dt.UTC), 5]),
        (
            "jobs",
            [None, True, 'a"b\\', -3, dt.datetime(2025, 1, 1, 3, 4, 5, 123, tzinfo=dt.timezone(dt.timedelta(hours=2)))],
        ),
        ("ümlaut", []),
    ]
    for kind, values in keys:
        payload = json.dumps([kind, [_encode_value(v) for v in values]], separators=(",", ":"))
        assert encode_cursor(kind, values) == base64.urlsafe_b64encode((_PREFIX + payload).encode()).decode().rstrip(
            "="
        )
