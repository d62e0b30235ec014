"""Keyset pagination shared by every list: first/after, last/before over a compound sort key."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy import Select, tuple_
from sqlalchemy.ext.asyncio import AsyncSession

from app.domain.edge.cursor import decode_cursor, encode_cursor
from app.infra.records import select_records

T = TypeVar("T")


class PageArgumentError(ValueError):
    """Pagination arguments that cannot be served (both first and last, a negative size, …)."""


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of rows with the cursors and flags a Relay connection needs."""

    items: Sequence[T]
    cursors: Sequence[str]
    has_next_page: bool
    has_previous_page: bool

    @property
    def start_cursor(self) -> str | None:
        return self.cursors[0] if self.cursors else None

    @property
    def end_cursor(self) -> str | None:
        return self.cursors[-1] if self.cursors else None


class LazyCursors(Sequence[str]):
    """A page's cursors, each encoded when first asked for (REST needs only the last one)."""

    def __init__(self, kind: str, keys: Sequence[Sequence[Any]]) -> None:
        self._kind = kind
        self._keys = keys
        self._encoded: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        position = range(len(self._keys))[index]
        cursor = self._encoded.get(position)
        if cursor is None:
            cursor = self._encoded[position] = encode_cursor(self._kind, self._keys[position])
        return cursor

    def __iter__(self) -> Any:
        encoded = self._encoded
        for position, key in enumerate(self._keys):  # a connection takes every cursor: no per-item indexing
            cursor = encoded.get(position)
            if cursor is None:
                cursor = encoded[position] = encode_cursor(self._kind, key)
            yield cursor

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True)
class PageRequest:
    """Relay-style arguments, already capped: exactly one of first/last is set."""

    first: int | None = None
    after: str | None = None
    last: int | None = None
    before: str | None = None

    @classmethod
    def build(
        cls,
        *,
        first: int | None = None,
        after: str | None = None,
        last: int | None = None,
        before: str | None = None,
        default_size: int = 50,
        max_size: int = 100,
    ) -> PageRequest:
        """Validate and cap the arguments; with neither first nor last, take the default first page."""
        if first is not None and last is not None:
            raise PageArgumentError("pass either first or last, not both")
        for name, value in (("first", first), ("last", last)):
            if value is not None and value < 0:
                raise PageArgumentError(f"{name} must not be negative")
            if value is not None and value > max_size:
                raise PageArgumentError(f"{name} is capped at {max_size} (asked for {value})")
        if first is None and last is None:
            first = default_size
        return cls(first=first, after=after, last=last, before=before)


@functools.cache
def _ordering(columns: tuple[Any, ...], descending: bool) -> tuple[Any, ...]:
    """ORDER BY clauses of a sort key, built once (a list builds the same ones on every page it serves)."""
    return tuple(c.desc() if descending else c.asc() for c in columns)


def _attributes(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    """The function of a row that gives its attributes `names`, in order (a sort key's values)."""
    return lambda row: tuple(getattr(row, name) for name in names)


async def paginate(
    session: AsyncSession,
    query: Select[Any],
    *,
    kind: str,
    columns: Sequence[Any],
    descending: bool,
    request: PageRequest,
    key_of: Callable[[Any], Sequence[Any]] | None = None,
    rows: bool = False,
) -> Page[Any]:
    """Run `query` (which selects one entity, or columns with `rows=True`) as one keyset page ordered by `columns`.

    `key_of(row)` returns the row's values for `columns` (they go into cursors); by default they are the
    row's attributes named as the columns. Every list uses an
    index ending in its sort key, so a deep page costs the same as the first one (no OFFSET). With
    `rows=True` the page holds records (named tuples of the selected columns, no ORM objects to build).
    """
    backward = request.last is not None
    size = request.last if backward else request.first
    assert size is not None
    scan_descending = descending != backward
    # The keyset bounds: (cursor values, rows after them in the scan order?) for after, then before.
    bounds = []
    for cursor, toward_end in ((request.after, True), (request.before, False)):
        if cursor:
            # "toward_end" means rows that come after the cursor in the list's order.
            bounds.append((decode_cursor(kind, cursor, len(columns)), toward_end != descending))

    statement = query
    key = tuple_(*columns)
    for values, greater in bounds:
        statement = statement.where(key > tuple_(*values) if greater else key < tuple_(*values))
    statement = statement.order_by(*_ordering(tuple(columns), scan_descending)).limit(size + 1)
    if rows:  # Core: records of the columns, no ORM result processing (app.infra.records)
        found = await select_records(session, statement)
    else:
        found = list((await session.scalars(statement)).all())
    more = len(found) > size
    found = found[:size]
    if backward:
        found.reverse()
    if key_of is None:
        key_of = _attributes([column.key for column in columns])
    cursors = LazyCursors(kind, [key_of(row) for row in found])
    if backward:
        return Page(found, cursors, has_next_page=request.before is not None, has_previous_page=more)
    return Page(found, cursors, has_next_page=more, has_previous_page=request.after is not None)
