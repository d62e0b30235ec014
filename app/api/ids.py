"""Opaque Relay global ids: base64url of "<Type>:<database id>"."""

from __future__ import annotations

import base64
import binascii

from app.domain.edge.bounds import INT64_MAX, is_ascii_digits
from app.domain.edge.cursor import unpadded_b64url

MAX_GLOBAL_ID_LENGTH = 200


class GlobalIdError(ValueError):
    """An id that this service did not issue."""


def to_global_id(type_name: str, pk: int) -> str:
    """The global id of row `pk` of GraphQL type `type_name`."""
    return unpadded_b64url(f"{type_name}:{pk}")


def from_global_id(global_id: str) -> tuple[str, int]:
    """(type name, database id) of a global id; GlobalIdError for anything else."""
    if not isinstance(global_id, str) or not global_id or len(global_id) > MAX_GLOBAL_ID_LENGTH:
        raise GlobalIdError("invalid id")
    try:
        raw = base64.urlsafe_b64decode(global_id + "=" * (-len(global_id) % 4)).decode()
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise GlobalIdError(f"invalid id {global_id[:40]!r}") from None
    type_name, sep, pk = raw.partition(":")
    if not sep or not type_name.isidentifier() or not is_ascii_digits(pk) or len(pk) > 19 or int(pk) > INT64_MAX:
        raise GlobalIdError(f"invalid id {global_id[:40]!r}")
    return type_name, int(pk)


def expect_global_id(global_id: str, type_name: str) -> int:
    """The database id of a global id that must name a `type_name`."""
    found, pk = from_global_id(global_id)
    if found != type_name:
        raise GlobalIdError(f"id {global_id[:40]!r} is an id of {found}, expected an id of {type_name}")
    return pk
