"""Alembic environment: async engines, batch mode for SQLite, or a connection handed in by app.migrate."""

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from app.config import Settings
from app.db import create_engine
from app.models import Base

config = context.config
target_metadata = Base.metadata


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_async() -> None:
    url = config.get_main_option("sqlalchemy.url") or Settings.from_env().database_url
    engine = create_engine(url)
    async with engine.connect() as connection:
        await connection.run_sync(_configure)
        await connection.commit()
    await engine.dispose()


def run_offline() -> None:
    url = config.get_main_option("sqlalchemy.url") or Settings.from_env().database_url
    context.configure(url=url, target_metadata=target_metadata, literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_offline()
elif (connection := config.attributes.get("connection")) is not None:
    _configure(connection)
else:
    asyncio.run(_run_async())
