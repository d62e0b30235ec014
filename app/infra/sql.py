"""Generic SQL helpers the areas share: chunked IN lists, rows by id, the first rows per group, multi-row inserts."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

from sqlalchemy import any_, bindparam, func, insert, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncSession

R = TypeVar("R")

IN_CHUNK = 500  # ids per IN (...) list


def chunks(ids: Sequence[int], size: int = IN_CHUNK) -> Iterator[Sequence[int]]:
    """`ids` in slices short enough for one IN (...) list."""
    for start in range(0, len(ids), size):
        yield ids[start : start + size]


def one_of(session: AsyncSession, column: Any, values: Sequence[Any]) -> Any:
    """`column IN values` for a statement of this session; on PostgreSQL `= ANY(one array)`.

    The array is one parameter whatever the number of values, so the statement's text stays the same
    from tick to tick (asyncpg prepares it once) and the server parses one parameter, not thousands.
    """
    if session.bind is not None and session.bind.dialect.name == "postgresql":
        return column == any_(bindparam(None, list(values), type_=ARRAY(column.type, dimensions=1)))
    return column.in_(list(values))


async def scalars_in(
    session: AsyncSession, query: Any, column: Any, ids: Sequence[int], size: int = IN_CHUNK
) -> list[Any]:
    """The query's scalars where `column` is one of `ids`: one query per `size` ids."""
    found: list[Any] = []
    for chunk in chunks(ids, size):
        found += (await session.scalars(query.where(column.in_(chunk)))).all()
    return found


async def rows_in(
    session: AsyncSession, query: Any, column: Any, ids: Sequence[int], size: int = IN_CHUNK
) -> list[Any]:
    """The query's rows where `column` is one of `ids`: one query per `size` ids."""
    found: list[Any] = []
    for chunk in chunks(ids, size):
        found += (await session.execute(query.where(column.in_(chunk)))).all()
    return found


async def by_ids(session: AsyncSession, model: type[R], ids: Sequence[int]) -> dict[int, R]:
    """Rows of `model` by id, one statement per IN chunk."""
    if not ids:
        return {}
    column: Any = model.id  # type: ignore[attr-defined]
    rows = await scalars_in(session, select(model), column, sorted(set(ids)))
    return {row.id: row for row in rows}


async def first_per_group(
    session: AsyncSession,
    model: type[R],
    group_column: Any,
    group_ids: Sequence[int],
    order: tuple[Any, ...],
    limit: int,
) -> dict[int, list[R]]:
    """The first `limit` rows of each group in `order`: a window function, so one statement for all groups."""
    result: dict[int, list[R]] = {gid: [] for gid in group_ids}
    if not group_ids or limit <= 0:
        return result
    id_column: Any = model.id  # type: ignore[attr-defined]
    rank = func.row_number().over(partition_by=group_column, order_by=order).label("rank")
    inner = select(id_column.label("row_id"), rank).where(group_column.in_(list(set(group_ids)))).subquery()
    query = (
        select(model)
        .join(inner, inner.c.row_id == id_column)
        .where(inner.c.rank <= limit)
        .order_by(group_column, inner.c.rank)
    )
    for row in (await session.scalars(query)).all():
        result[getattr(row, group_column.key)].append(row)
    return result


async def insert_rows(session: AsyncSession, model: Any, rows: list[dict[str, Any]]) -> list[int]:
    """INSERT the rows (dicts of one shape) in multi-row statements; their new ids, in the rows' order.

    PostgreSQL gets one INSERT .. SELECT FROM unnest(one array per column) WITH ORDINALITY ORDER BY
    ordinality: its text is the same whatever the number of rows (asyncpg reuses the prepared
    statement) and the server parses a few parameters, not one per value (SQLAlchemy's multi-row
    VALUES took 48 ms for 1,000 job rows, this 19). The ids are drawn in the ORDER BY's order, so
    sorted they are in row order. SQLite (no arrays) gets plain multi-row INSERT .. RETURNING pages:
    it numbers an INTEGER PRIMARY KEY row by row in VALUES order (max + 1, under the transaction's
    write lock), so there too the ids sorted are in row order.
    """
    if not rows:
        return []
    # the table, not the ORM entity: an ORM bulk INSERT leaves out None values and so splits rows by shape
    table = model.__table__
    if session.bind is not None and session.bind.dialect.name == "sqlite":
        return sorted((await session.execute(insert(table).returning(table.c.id), rows)).scalars())
    names = list(rows[0])
    # dimensions=1: a JSON column's values are lists too, each one element of the array, not a dimension
    arrays = [
        bindparam(None, [row[name] for row in rows], type_=ARRAY(table.c[name].type, dimensions=1)) for name in names
    ]
    source = func.unnest(*arrays).table_valued(*names, with_ordinality="ordinal").render_derived()
    statement = insert(table).from_select(names, select(*(source.c[name] for name in names)).order_by(source.c.ordinal))
    return sorted((await session.execute(statement.returning(table.c.id))).scalars())
