"""The change-feed waker: one LISTEN connection per process on PostgreSQL that survives the database dropping
it; a poll on SQLite."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.feed import service as feed
from app.feed.listener import APPLICATION_NAME, FeedWaker, shared_waker
from tests.plugins.database import Database


async def _append(sessions: async_sessionmaker[AsyncSession]) -> None:
    async with sessions() as session, session.begin():
        await feed.append(session, topic="attempt", entity_id=1)


async def _until(predicate, timeout: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.05)


# LISTEN/NOTIFY exists only on PostgreSQL: these two run there alone; SQLite's polling has its own test.
POSTGRES_ONLY = pytest.mark.parametrize("database", ["postgres"], indirect=True)
SQLITE_ONLY = pytest.mark.parametrize("database", ["sqlite"], indirect=True)


@POSTGRES_ONLY
async def test_notification_wakes_every_waiting_reader_and_the_last_reader_stops_the_listener(
    database: Database, sessions: async_sessionmaker[AsyncSession]
) -> None:
    waker = FeedWaker(database.url, listening_timeout=60)
    async with waker.reader(), waker.reader():
        await _until(lambda: waker.listening)
        marks = [waker.mark(), waker.mark()]
        waiting = [asyncio.ensure_future(waker.wait(mark)) for mark in marks]
        await asyncio.sleep(0.1)
        await _append(sessions)
        # Woken by the notification (the 60 s listening timeout would say False).
        assert await asyncio.wait_for(asyncio.gather(*waiting), timeout=30) == [True, True]
        assert waker.notifications >= 1
        # A notification between taking the mark and waiting is not lost.
        mark = waker.mark()
        await _append(sessions)
        await _until(lambda: waker.mark() != mark)
        assert await waker.wait(mark) is True
    assert waker.readers == 0 and not waker.listening


@POSTGRES_ONLY
async def test_listener_reconnects_after_the_database_drops_its_connection(
    database: Database, sessions: async_sessionmaker[AsyncSession]
) -> None:
    waker = FeedWaker(database.url, listening_timeout=60, reconnect_min=0.1, health_interval=0.5)
    async with waker.reader():
        await _until(lambda: waker.listening)
        async with sessions() as session, session.begin():
            killed = await session.scalar(
                text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
                    "application_name = :name AND datname = current_database()"
                ),
                {"name": APPLICATION_NAME},
            )
        assert killed == 1
        await _until(lambda: waker.connects >= 2 and waker.listening)
        mark = waker.mark()
        waiting = asyncio.ensure_future(waker.wait(mark))
        await asyncio.sleep(0.1)
        await _append(sessions)
        assert await asyncio.wait_for(waiting, timeout=30) is True


@SQLITE_ONLY
async def test_sqlite_readers_poll(database: Database) -> None:
    waker = FeedWaker(database.url, poll_interval=0.05)
    async with waker.reader():
        assert not waker.uses_notify and not waker.listening
        mark = waker.mark()
        assert await asyncio.wait_for(waker.wait(mark), timeout=5) is False  # a poll tick, not a notification
        waker.wake()
        assert await waker.wait(mark) is True


async def test_one_shared_waker_per_database_and_loop(database: Database) -> None:
    assert shared_waker(database.url) is shared_waker(database.url)
