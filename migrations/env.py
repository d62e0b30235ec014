"""Alembic environment: async engines, batch mode for SQLite, or a connection handed in by app.infra.migrate."""

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from app.infra.all_models import Base
from app.infra.config import Settings
from app.infra.db import create_engine

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
