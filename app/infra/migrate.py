"""Runs the Alembic migrations programmatically (CLI, service start-up and tests)."""

from __future__ import annotations

from collections.abc import Callable

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from app.infra.resources import resource_dir


def alembic_config() -> Config:
    """The project's Alembic configuration, built in code: works from any directory and from a wheel."""
    config = Config()
    config.set_main_option("script_location", str(resource_dir("migrations")))
    config.set_main_option("path_separator", "os")
    return config


async def upgrade(engine: AsyncEngine, revision: str = "head") -> None:
    """Apply migrations up to `revision` on the engine's database."""
    await _run(engine, command.upgrade, revision)


async def downgrade(engine: AsyncEngine, revision: str) -> None:
    """Revert migrations down to `revision`."""
    await _run(engine, command.downgrade, revision)


async def _run(engine: AsyncEngine, alembic_command: Callable[[Config, str], None], revision: str) -> None:
    """Run an Alembic command on the engine's connection, in one transaction."""

    def run(connection: Connection) -> None:
        config = alembic_config()
        config.attributes["connection"] = connection
        alembic_command(config, revision)

    async with engine.begin() as connection:
        await connection.run_sync(run)


async def current_revision(engine: AsyncEngine) -> str | None:
    """The revision the database is at (None for an empty database)."""

    def read(connection: Connection) -> str | None:
        return MigrationContext.configure(connection).get_current_revision()

    async with engine.connect() as connection:
        return await connection.run_sync(read)


def head_revision() -> str | None:
    """The newest revision shipped with this code."""
    return ScriptDirectory.from_config(alembic_config()).get_current_head()
