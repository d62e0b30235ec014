"""SQLite under pressure: concurrent writers never see "database is locked"; a full disk is a clear error only.

Each engine stands for one process (the API, the worker): its own connection and thread on the
same database file. Every write path opens its transaction with `session.begin()`, which on SQLite
takes the write lock up front (BEGIN IMMEDIATE, app/infra/db.py), so a writer waits (busy_timeout) instead
of failing when another one committed after it read.
"""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from app.audit import service as audit
from app.audit.models import AuditEvent
from app.infra.db import create_engine, session_factory
from app.infra.errors import STORAGE_FULL, database_problem
from app.infra.migrate import upgrade
from app.leases import queries as lease_queries
from app.leases import service as leases
from app.leases.models import WorkerPosition
from tests.plugins import require

WRITERS = 6
ROUNDS = 40


async def test_concurrent_writers_never_see_database_is_locked(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path}/busy.db"
    setup = create_engine(url)
    await upgrade(setup)
    engines = [create_engine(url) for _ in range(WRITERS)]
    failures: list[str] = []

    async def writer(number: int) -> None:
        sessions = session_factory(engines[number])
        for round_ in range(ROUNDS):
            try:
                async with sessions() as session, session.begin():
                    # Read, then write in the same transaction: the pattern that used to fail (or lose updates).
                    stored = await lease_queries.load_positions(session, names=["shared"])
                    await asyncio.sleep(0)
                    await leases.save_positions(session, positions={"shared": stored.get("shared", 0) + 1})
                    await audit.record(
                        session, component=f"writer-{number}", event_type="test.write", message=f"round {round_}"
                    )
            except Exception as exc:  # noqa: BLE001 - every failure is the finding
                failures.append(f"{type(exc).__name__}: {exc}"[:200])

    try:
        await asyncio.gather(*(writer(n) for n in range(WRITERS)))
        async with session_factory(setup)() as session:
            counted = await session.scalar(select(WorkerPosition.position).where(WorkerPosition.name == "shared"))
            events = await session.scalar(select(func.count()).select_from(AuditEvent))
    finally:
        for engine in [setup, *engines]:
            await engine.dispose()
    assert failures == []
    assert counted == WRITERS * ROUNDS  # no lost update either
    assert events == WRITERS * ROUNDS


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs for the data directory (needs root to mount)."""
    mount = tmp_path / "full"
    mount.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        require("a small tmpfs mount (root)", str(exc))
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False, capture_output=True)


async def test_a_full_disk_is_a_clear_error_and_corrupts_nothing(small_disk: Path) -> None:
    path = small_disk / "recovery.db"
    engine = create_engine(f"sqlite+aiosqlite:///{path}")
    sessions = session_factory(engine)
    committed = 0
    problem = None
    try:
        await upgrade(engine)
        for number in range(10_000):
            try:
                async with sessions() as session, session.begin():
                    await audit.record(
                        session,
                        component="test",
                        event_type="test.fill",
                        message=f"event {number} {uuid.uuid4().hex}",
                        payload={"padding": "x" * 20_000},
                    )
            except Exception as exc:  # noqa: BLE001 - the full disk is the point
                problem = database_problem(exc)
                assert problem is not None, f"unclassified: {type(exc).__name__}: {exc}"
                break
            committed += 1
        async with sessions() as session:  # reading still works, and every committed row is there
            stored = await session.scalar(select(func.count()).select_from(AuditEvent))
    finally:
        await engine.dispose()
    assert problem is not None and problem.code == STORAGE_FULL, problem
    assert "disk is full" in problem.message
    assert committed > 0 and stored == committed
    with sqlite3.connect(str(path)) as check:
        assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
