"""Engine and session factories, the declarative Base and the column types every model shares."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any, TypeAlias

import msgspec
from sqlalchemy import BigInteger, DateTime, Integer, MetaData, event, inspect, orm
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, SessionTransaction, SessionTransactionOrigin
from sqlalchemy.types import TypeDecorator

from app.domain.edge.timefmt import iso_utc

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# The unit of work the interfaces hold and pass to the areas' queries and services (they build no SQL).
Session: TypeAlias = AsyncSession
Sessions: TypeAlias = async_sessionmaker[AsyncSession]

# A 64-bit id on PostgreSQL; SQLite only autoincrements a column declared INTEGER.
BigId = BigInteger().with_variant(Integer(), "sqlite")


class UTCDateTime(TypeDecorator):
    """A timezone-aware UTC timestamp on every backend (SQLite stores it naive)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(dt.UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is dt.UTC:  # what asyncpg returns for every timestamptz: nothing to convert
            return value
        if value.tzinfo is None:
            return value.replace(tzinfo=dt.UTC)
        return value.astimezone(dt.UTC)


def utcnow() -> dt.datetime:
    """The current time, timezone-aware in UTC."""
    return dt.datetime.now(dt.UTC)


class Base(DeclarativeBase):
    """Declarative base whose constraints get stable names (Alembic needs them)."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def _ensure_sqlite_dir(url: str) -> None:
    database = make_url(url).database
    if database and database != ":memory:":
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)


def decode_text(raw: bytes) -> str:
    """TEXT as SQLite returns it: another tool may have written bytes that are not UTF-8; show them as U+FFFD."""
    return raw.decode("utf-8", errors="replace")


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # aiosqlite's connection (under SQLAlchemy's adapter) forwards text_factory to the sqlite3 connection.
    driver_connection = getattr(dbapi_connection, "driver_connection", None) or getattr(
        dbapi_connection, "_connection", None
    )
    if driver_connection is not None and hasattr(driver_connection, "text_factory"):
        driver_connection.text_factory = decode_text
    # We emit BEGIN ourselves (below), so that a writing transaction can take the write lock up front.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def _driver_execute(conn: Any, statement: str) -> None:
    """Transaction control straight on the driver (like pysqlite's own implicit BEGIN, not a statement of ours)."""
    cursor = conn.connection.cursor()
    try:
        cursor.execute(statement)
    finally:
        cursor.close()


def _sqlite_begin(conn: Any) -> None:
    _driver_execute(conn, "BEGIN")


def _sqlite_writer_begin(session: orm.Session, transaction: SessionTransaction, connection: Any) -> None:
    """`session.begin()` (how every write path opens its transaction) takes SQLite's write lock at once.

    A deferred transaction that reads first and writes later cannot wait for the lock once another
    writer committed after its read (SQLITE_BUSY at once, busy_timeout does not apply): "database is
    locked". BEGIN IMMEDIATE waits (busy_timeout) for the lock before anything is read instead.
    Sessions that only read (autobegin) stay deferred and never block writers (WAL).
    """
    if connection.dialect.name != "sqlite" or transaction.origin is not SessionTransactionOrigin.BEGIN:
        return
    if transaction.nested or transaction.parent is not None:
        return
    _driver_execute(connection, "ROLLBACK")  # the deferred BEGIN above has done nothing yet
    _driver_execute(connection, "BEGIN IMMEDIATE")


event.listen(orm.Session, "after_begin", _sqlite_writer_begin)


_decode_json = msgspec.json.decode


def json_value(text: str | bytes) -> Any:
    """A JSON column's value, parsed by msgspec (~3x faster per row than the json module); anything msgspec refuses
    (NaN, a number out of its range) by the json module, as before."""
    try:
        return _decode_json(text)
    except msgspec.DecodeError:
        return json.loads(text)


def create_engine(url: str, **kwargs: Any) -> AsyncEngine:
    """An async engine; SQLite gets WAL, foreign keys, a busy timeout and write-locking writer transactions."""
    kwargs.setdefault("json_deserializer", json_value)
    if is_sqlite(url):
        _ensure_sqlite_dir(url)
        kwargs.setdefault("connect_args", {"timeout": 30})
        engine = create_async_engine(url, **kwargs)
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        event.listen(engine.sync_engine, "begin", _sqlite_begin)
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    engine = create_async_engine(url, **kwargs)
    if engine.dialect.driver == "asyncpg":
        engine.sync_engine.dialect.do_ping = _ping_in_one_trip  # type: ignore[method-assign]
    return engine


def _ping_in_one_trip(dbapi_connection: Any) -> bool:
    """The pool's pre-ping as one round trip (`;`), not SQLAlchemy's BEGIN, `;`, ROLLBACK.

    SQLAlchemy wraps the ping of a connection not in autocommit in a transaction for PgBouncer's
    transaction mode, which this service does not use; three round trips before every checkout were
    the largest fixed cost of an API read. The ping still fails, and the pool still replaces the
    connection, when the server is gone. The ping runs as SQLAlchemy runs it in autocommit.
    """
    if getattr(dbapi_connection, "_transaction", None) is not None:
        dbapi_connection.ping()
        return True
    saved = dbapi_connection.isolation_level
    dbapi_connection.isolation_level = "autocommit"
    try:
        dbapi_connection.ping()
    finally:
        dbapi_connection.isolation_level = saved
    return True


def dialect_of(session: AsyncSession) -> str:
    """The name of the session's database dialect (`postgresql`, `sqlite`)."""
    assert session.bind is not None
    return session.bind.dialect.name


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    """Sessions that keep loaded objects usable after commit."""
    return async_sessionmaker(engine, expire_on_commit=False)


def read_session_factory(engine: AsyncEngine, sessions: async_sessionmaker[AsyncSession]) -> Sessions:
    """Sessions for reads of one statement: on PostgreSQL in autocommit (no BEGIN and ROLLBACK round trips around
    the query; one statement sees one snapshot either way), elsewhere the ordinary sessions."""
    if engine.dialect.name != "postgresql":
        return sessions
    return async_sessionmaker(engine.execution_options(isolation_level="AUTOCOMMIT"), expire_on_commit=False)


def row_dict(row: Any) -> dict[str, Any] | None:
    """Every mapped column of an ORM row, JSON-ready (datetimes as ISO 8601 UTC)."""
    if row is None:
        return None
    values: dict[str, Any] = {}
    for column in inspect(row).mapper.column_attrs:
        value = getattr(row, column.key)
        values[column.key] = iso_utc(value) if isinstance(value, dt.datetime) else value
    return values
