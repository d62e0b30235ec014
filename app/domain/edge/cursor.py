"""Opaque keyset cursors: a list of sort-key values encoded as URL-safe text."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import functools
import json
from collections.abc import Sequence
from typing import Any

from app.domain.edge.bounds import INT64_MAX, BoundsError, check_time

_PREFIX = "k1:"
_URLSAFE = bytes.maketrans(b"+/", b"-_")
MAX_CURSOR_LENGTH = 512


class CursorError(ValueError):
    """A cursor or page token that this service did not issue (or that was damaged)."""


def _encode_value(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return {"t": value.astimezone(dt.UTC).isoformat()}
    if value is None or isinstance(value, (int, str, bool)):
        return value
    raise TypeError(f"cannot put {type(value).__name__} in a cursor")


def _decode_value(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"t"} and isinstance(value["t"], str):
        try:
            parsed = dt.datetime.fromisoformat(value["t"])
        except ValueError:
            raise CursorError("cursor holds a bad timestamp") from None
        try:
            return check_time(parsed, "cursor timestamp")
        except BoundsError:
            raise CursorError("cursor holds a bad timestamp") from None
    if isinstance(value, int) and not isinstance(value, bool) and not -INT64_MAX - 1 <= value <= INT64_MAX:
        raise CursorError("cursor holds an out-of-range number")
    if value is None or isinstance(value, (int, str, bool)):
        return value
    raise CursorError("cursor holds an unexpected value")


def _json_value(value: Any) -> str:
    """`json.dumps(_encode_value(value), separators=(",", ":"))`, without the encoder for the usual key types."""
    if type(value) is int:
        return str(value)
    if isinstance(value, dt.datetime):
        # digits, -, :, ., +, T: nothing to escape; a UTC time (as asyncpg gives them) needs no astimezone
        return '{"t":"' + (value if value.tzinfo is dt.UTC else value.astimezone(dt.UTC)).isoformat() + '"}'
    return json.dumps(_encode_value(value), separators=(",", ":"))


def unpadded_b64url(text: str) -> str:
    """`base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")` in one C call each step (one per row of a
    page, for its cursor and its global id)."""
    return binascii.b2a_base64(text.encode(), newline=False).translate(_URLSAFE).rstrip(b"=").decode()


@functools.cache
def _head(kind: str) -> str:
    """The text every cursor of a list starts with (a page encodes one cursor per row)."""
    return _PREFIX + "[" + json.dumps(kind) + ",["


def encode_cursor(kind: str, values: Sequence[Any]) -> str:
    """Encode the sort-key values of one row; `kind` stops a cursor being reused on another list."""
    text = _head(kind) + ",".join([_json_value(v) for v in values]) + "]]"
    return unpadded_b64url(text)


def decode_cursor(kind: str, cursor: str, arity: int) -> tuple[Any, ...]:
    """Decode a cursor made by encode_cursor for the same list kind, or raise CursorError."""
    if not isinstance(cursor, str) or not cursor or len(cursor) > MAX_CURSOR_LENGTH:
        raise CursorError("invalid cursor")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        raise CursorError("invalid cursor") from None
    if not raw.startswith(_PREFIX):
        raise CursorError("invalid cursor")
    try:
        found_kind, values = json.loads(raw[len(_PREFIX) :])
    except (ValueError, TypeError):
        raise CursorError("invalid cursor") from None
    if found_kind != kind:
        raise CursorError(f"cursor belongs to another list ({found_kind!s:.40}), not {kind}")
    if not isinstance(values, list) or len(values) != arity:
        raise CursorError("invalid cursor")
    return tuple(_decode_value(v) for v in values)
