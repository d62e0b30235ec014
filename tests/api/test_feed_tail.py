"""The shared change-feed tail: one read per wake-up for every subscriber, the same entries in the same order for
each, a subscriber with an old position served from the database, and workflow subscribers woken only for theirs."""

from __future__ import annotations

import asyncio

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.feed import service as feed
from app.feed.listener import FeedWaker
from app.feed.tail import FeedTail
from tests.plugins.database import Database


async def _append(sessions: async_sessionmaker[AsyncSession], count: int, workflow_id: int | None = None) -> None:
    for n in range(count):
        async with sessions() as session, session.begin():
            await feed.append(session, topic="attempt", entity_id=n + 1, workflow_id=workflow_id)


async def _collect(subscriber, until: int) -> list[int]:
    seen: list[int] = []
    while not seen or seen[-1] < until:
        seen.extend(entry.id for entry in await asyncio.wait_for(subscriber.next(["attempt"]), 30))
    return seen


async def test_every_subscriber_gets_every_entry_in_order_from_one_shared_read(
    database: Database, sessions: async_sessionmaker[AsyncSession]
) -> None:
    tail = FeedTail(sessions, FeedWaker(database.url, poll_interval=0.05), keep=5, min_interval=0.01)
    await _append(sessions, 3)  # before anyone subscribed: read by the one that asks for them only
    async with tail.subscriber() as first:
        start = await first.start(None)
        async with tail.subscriber() as old, tail.subscriber(workflow_id=7) as mine, tail.subscriber() as second:
            await old.start(0)
            await mine.start(None)
            await second.start(None)
            await _append(sessions, 4)
            await _append(sessions, 2, workflow_id=7)
            end = start + 6
            reads_before = tail.reads
            got = await asyncio.gather(_collect(first, end), _collect(second, end), _collect(old, end))
            assert got[0] == got[1] == list(range(start + 1, end + 1))
            # the old position is behind the buffer (keep=5): its backlog came from the database, in order
            assert got[2] == list(range(1, end + 1))
            # the workflow's subscriber takes what it wants from the same buffer
            mine_seen = [e.id for e in await asyncio.wait_for(mine.next(["attempt"]), 5) if e.workflow_id == 7]
            assert mine_seen == [end - 1, end]
            # three subscribers, yet the tail read the feed a few times, not once per subscriber per change
            assert tail.reads - reads_before <= 8
    assert tail.subscribers == 0
