"""Rows of a Core select of columns as records (named tuples), read on asyncpg directly where that is safe.

SQLAlchemy spends ~0.3 ms around a 100-row page (statement compilation lookup, execution context,
result rows), three times asyncpg's own fetch. On an asyncpg connection in autocommit (the API's read
sessions) a select whose caller names its shape is built and compiled once per shape and run with
asyncpg's `fetch`, its parameters and columns through the same type processors SQLAlchemy applies. Anything else
(another driver, a transaction, a statement that renders per execution), and any error, goes through
SQLAlchemy, so errors, disconnect handling and the pool behave as before: a failed autocommit select
is simply run again the ordinary way, which raises what it always raised.
"""

from __future__ import annotations

import functools
from collections import namedtuple
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from sqlalchemy import Select
from sqlalchemy.ext.asyncio import AsyncSession


@functools.cache
def record_type(columns: tuple[str, ...]) -> Any:
    """A named tuple of a select's columns: its attributes read ~10x faster than a Core Row's, and a page reads each
    of 100 rows' columns once or twice (cursor keys, JSON)."""
    return namedtuple("Record", columns)


class _Shape:
    """A select's SQL for asyncpg, with how its parameters and columns convert (the processors SQLAlchemy applies)."""

    __slots__ = ("sql", "params", "processed", "make")

    def __init__(self, sql: str, params: tuple[Any, ...], processed: tuple[tuple[int, Any], ...], make: Any) -> None:
        self.sql = sql
        self.params = params  # bind processor (or None) per parameter
        self.processed = processed  # (index, result processor) of the columns that have one (few do)
        self.make = make


# (dialect, the caller's shape key) -> shape, or None for a statement that must go the ordinary way
_SHAPES: dict[tuple[Any, Hashable], _Shape | None] = {}
_MAX_SHAPES = 512


def _shape_of(query: Select[Any], values: Sequence[Any], dialect: Any) -> _Shape | None:
    """The shape of `query`, when its parameters are exactly `values` in order (else None: the key cannot tell)."""
    compiled = query.compile(dialect=dialect)
    if not compiled.positional or compiled.literal_execute_params or compiled.post_compile_params:
        return None
    binds = [compiled.binds[name] for name in compiled.positiontup or ()]
    if any(b.expanding for b in binds) or [b.effective_value for b in binds] != list(values):
        return None
    params = tuple(b.type.dialect_impl(dialect).bind_processor(dialect) for b in binds)
    columns = [c.type.dialect_impl(dialect).result_processor(dialect, None) for c in query.selected_columns]
    processed = tuple((index, process) for index, process in enumerate(columns) if process is not None)
    make = record_type(tuple(query.selected_columns.keys()))._make
    return _Shape(compiled.string, params, processed, make)


async def select_records(
    session: AsyncSession, build: Callable[[], Select[Any]], shape: Hashable | None, values: Sequence[Any]
) -> list[Any]:
    """The rows of the select `build()` makes, as records of its column names.

    `shape` names the statement's structure (equal keys: the same SQL text) and `values` are its parameters in
    the order they appear; with `shape` None the statement is built and run the ordinary way.
    """
    conn = await session.connection()
    sync = conn.sync_connection
    assert sync is not None
    dialect = sync.dialect
    query = None
    if (
        shape is not None
        and dialect.driver == "asyncpg"
        and sync.get_execution_options().get("isolation_level") == "AUTOCOMMIT"
    ):
        key = (dialect, shape)
        if key in _SHAPES:
            known = _SHAPES[key]
        else:
            query = build()
            if len(_SHAPES) >= _MAX_SHAPES:
                _SHAPES.clear()
            known = _SHAPES[key] = _shape_of(query, values, dialect)
        if known is not None:
            params = [v if p is None else p(v) for p, v in zip(known.params, values, strict=True)]
            try:
                found = await sync.connection.driver_connection.fetch(known.sql, *params)  # type: ignore[union-attr]
            except Exception:  # noqa: BLE001 - run again the ordinary way, which reports it as always
                pass
            else:
                make, processed = known.make, known.processed
                if not processed:
                    return [make(row) for row in found]
                records = []
                for row in found:
                    values = list(row)
                    for index, process in processed:
                        values[index] = process(values[index])
                    records.append(make(values))
                return records
    result = await conn.execute(query if query is not None else build())
    make = record_type(tuple(result.keys()))._make
    return [make(row) for row in result.all()]
