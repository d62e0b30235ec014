"""A scratch PostgreSQL database for a bench run: created on $RECOVERY_TEST_PG's server, dropped afterwards."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator

import asyncpg

PG_SERVER = os.environ.get("RECOVERY_TEST_PG", "postgresql+asyncpg://postgres@127.0.0.1:5432/test")


def dsn(url: str) -> str:
    """The asyncpg form of a SQLAlchemy URL."""
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


async def reachable(server: str = PG_SERVER) -> str | None:
    """None when the server answers, else why not (one line)."""
    try:
        conn = await asyncpg.connect(dsn(server), timeout=10)
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        return f"{type(exc).__name__}: {exc}"
    await conn.close()
    return None


@contextlib.asynccontextmanager
async def scratch_postgres(server: str = PG_SERVER) -> AsyncIterator[str]:
    """The SQLAlchemy URL of a new, empty database on `server`; it is dropped (connections forced off) on exit."""
    name = f"recovery_bench_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(dsn(server))
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    try:
        yield server.rsplit("/", 1)[0] + "/" + name
    finally:
        admin = await asyncpg.connect(dsn(server))
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()
