"""Migrations build the schema on SQLite and PostgreSQL and agree with the ORM models."""

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from app.infra.all_models import Base
from app.infra.migrate import current_revision, downgrade, head_revision, upgrade
from tests.plugins.database import Database


async def test_database_is_at_head(database: Database) -> None:
    assert await current_revision(database.engine) == head_revision()


async def test_models_and_migrations_agree(database: Database) -> None:
    def diff(connection):
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        return compare_metadata(context, Base.metadata)

    async with database.engine.connect() as conn:
        differences = await conn.run_sync(diff)
    assert differences == [], differences


async def test_downgrade_to_base_and_back(database: Database) -> None:
    await downgrade(database.engine, "base")

    def tables(connection):
        return set(inspect(connection).get_table_names()) - {"alembic_version"}

    async with database.engine.connect() as conn:
        assert await conn.run_sync(tables) == set()
    await upgrade(database.engine)
    async with database.engine.connect() as conn:
        assert await conn.run_sync(tables) == set(Base.metadata.tables)
