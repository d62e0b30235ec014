"""Database fixtures: every database test runs on SQLite and on PostgreSQL, schema built by migrations."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.infra.all_models import Base
from app.infra.config import Settings
from app.infra.context import AppContext
from app.infra.db import create_engine, session_factory
from app.infra.migrate import upgrade
from tests.plugins import require

PG_SERVER = os.environ.get("RECOVERY_TEST_PG", "postgresql+asyncpg://postgres@127.0.0.1:5432/test")
BACKENDS = ["sqlite", "postgres"]


@dataclass
class Database:
    """A migrated database of one backend shared by a test session."""

    backend: str
    url: str
    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]

    async def reset(self) -> None:
        """Empty every table (much faster than migrating again for each test)."""
        tables = [t.name for t in reversed(Base.metadata.sorted_tables)]
        async with self.engine.begin() as conn:
            if self.backend == "postgres":
                await conn.execute(text(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE"))
            else:
                for name in tables:
                    await conn.execute(text(f"DELETE FROM {name}"))


async def _admin(statement: str) -> None:
    """Run one statement on the test server outside a transaction (CREATE/DROP DATABASE need that)."""
    admin = create_engine(PG_SERVER, isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as conn:
            await conn.execute(text(statement))
    finally:
        await admin.dispose()


async def create_postgres_database() -> str:
    """Create a fresh, uniquely named database on the test server and return its URL."""
    name = f"recovery_test_{uuid.uuid4().hex[:10]}"
    await _admin(f'CREATE DATABASE "{name}"')
    return PG_SERVER.rsplit("/", 1)[0] + "/" + name


async def drop_postgres_database(url: str) -> None:
    """Drop a database made by create_postgres_database."""
    await _admin(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)')


async def _open(backend: str, tmp_dir: str) -> Database:
    if backend == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_dir}/test.db"
    else:
        try:
            url = await create_postgres_database()
        except Exception as exc:
            require(f"PostgreSQL at {PG_SERVER}", str(exc))
    engine = create_engine(url)
    await upgrade(engine)
    return Database(backend, url, engine, session_factory(engine))


@pytest.fixture(scope="session")
async def _databases(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[dict[str, Database]]:
    opened: dict[str, Database] = {}
    yield opened
    for db in opened.values():
        await db.engine.dispose()
        if db.backend == "postgres":
            await drop_postgres_database(db.url)


@pytest.fixture(params=BACKENDS)
async def database(
    request: pytest.FixtureRequest, _databases: dict[str, Database], tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Database]:
    """A clean, migrated database: the test runs once on SQLite and once on PostgreSQL."""
    backend = request.param
    if backend not in _databases:
        _databases[backend] = await _open(backend, str(tmp_path_factory.mktemp(f"db-{backend}")))
    db = _databases[backend]
    await db.reset()
    yield db


@pytest.fixture
def sessions(database: Database) -> async_sessionmaker[AsyncSession]:
    """The session factory of the current backend."""
    return database.sessions


@pytest.fixture
def settings(database: Database, tmp_path) -> Settings:
    """Settings pointing at the current backend's database."""
    return Settings.build(database_url=database.url, data_dir=str(tmp_path), cluster="test", environment="test-env")


@pytest.fixture
async def ctx(database: Database, settings: Settings) -> AsyncIterator[AppContext]:
    """An AppContext sharing the test database's engine."""
    yield AppContext(settings=settings, engine=database.engine, sessions=database.sessions)
