"""Wakes live readers of the change feed: one shared LISTEN connection per process on PostgreSQL, a poll on SQLite.

The feed table is the truth; a wake-up only says "read again". Readers take a `mark()` BEFORE they
read the feed and then `wait(mark)`: a notification that arrives between the read and the wait is
not lost, because the mark has already moved on and wait returns at once.

    waker = shared_waker(settings.database_url)
    async with waker.reader():
        while True:
            mark = waker.mark()
            entries = await read_since(...)       # handle them, remember the last id
            if not entries:
                await waker.wait(mark)

On PostgreSQL the first reader starts one listener task with a dedicated asyncpg connection
(`LISTEN recovery_feed`); the last reader to leave stops it. If the connection drops the task
reconnects with exponential backoff, and meanwhile readers fall back to polling, so nothing is
missed, only delayed. On SQLite (no NOTIFY) `wait` is a short sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy.engine import make_url

from app.feed.service import NOTIFY_CHANNEL
from app.infra.db import is_sqlite

log = logging.getLogger("recovery.feed")

APPLICATION_NAME = "recovery-feed-listener"


async def stop_task(task: asyncio.Task[Any] | None) -> None:
    """Cancel a background task (if it still runs) and wait until it has ended."""
    if task is not None and not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class FeedWaker:
    """Wake-ups for change-feed readers of one database (use shared_waker() for the process-wide one)."""

    def __init__(
        self,
        database_url: str,
        *,
        poll_interval: float = 0.25,
        listening_timeout: float = 5.0,
        reconnect_min: float = 0.5,
        reconnect_max: float = 10.0,
        health_interval: float = 10.0,
    ) -> None:
        self.database_url = database_url
        self.uses_notify = not is_sqlite(database_url)
        self.poll_interval = poll_interval
        # Even while LISTENing, readers re-read at least this often (belt and braces).
        self.listening_timeout = listening_timeout
        self.reconnect_min = reconnect_min
        self.reconnect_max = reconnect_max
        self.health_interval = health_interval
        self._generation = 0
        self._event: asyncio.Event | None = None
        self._readers = 0
        self._task: asyncio.Task[None] | None = None
        self._listening = False
        self.connects = 0  # successful LISTEN connections so far (tests watch reconnects)
        self.notifications = 0

    @property
    def listening(self) -> bool:
        """True while the LISTEN connection is up (always False on SQLite)."""
        return self._listening

    @property
    def readers(self) -> int:
        return self._readers

    def mark(self) -> int:
        """The wake-up count now; take it before reading the feed and pass it to wait()."""
        return self._generation

    async def wait(self, mark: int, timeout: float | None = None) -> bool:
        """Until a wake-up after `mark`, or a poll interval / timeout passes. True when woken by a notification."""
        if self._generation != mark:
            return True
        if not (self.uses_notify and self._listening):
            # SQLite, or the listener is reconnecting: poll.
            delay = self.poll_interval if timeout is None else min(timeout, self.poll_interval)
            await asyncio.sleep(delay)
            return self._generation != mark
        event = self._current_event()
        limit = self.listening_timeout if timeout is None else min(timeout, self.listening_timeout)
        try:
            await asyncio.wait_for(event.wait(), timeout=limit)
        except TimeoutError:
            pass
        return self._generation != mark

    @contextlib.asynccontextmanager
    async def reader(self) -> AsyncIterator[FeedWaker]:
        """Count a reader for the block; the listener runs while at least one reader is inside."""
        self._readers += 1
        if self.uses_notify and (self._task is None or self._task.done()):
            self._task = asyncio.create_task(self._listen(), name="feed-listener")
        try:
            yield self
        finally:
            self._readers -= 1
            if self._readers == 0:
                await self.stop()

    async def stop(self) -> None:
        """Stop the listener task (it starts again with the next reader)."""
        task, self._task = self._task, None
        await stop_task(task)
        self._listening = False

    def wake(self) -> None:
        """Wake every waiting reader (a notification, a reconnect, or a local write)."""
        self._generation += 1
        event, self._event = self._event, None
        if event is not None:
            event.set()

    def _current_event(self) -> asyncio.Event:
        if self._event is None:
            self._event = asyncio.Event()
        return self._event

    def _on_notify(self, connection: Any, pid: int, channel: str, payload: str) -> None:
        self.notifications += 1
        self.wake()

    async def _listen(self) -> None:
        """Hold one LISTEN connection; on any failure reconnect with exponential backoff."""
        import asyncpg

        dsn = make_url(self.database_url).set(drivername="postgresql").render_as_string(hide_password=False)
        delay = self.reconnect_min
        while True:
            connection = None
            try:
                connection = await asyncpg.connect(
                    dsn, timeout=10, server_settings={"application_name": APPLICATION_NAME}
                )
                lost = asyncio.Event()
                connection.add_termination_listener(lambda _conn, lost=lost: lost.set())
                await connection.add_listener(NOTIFY_CHANNEL, self._on_notify)
                self._listening = True
                self.connects += 1
                delay = self.reconnect_min
                log.info("listening for change-feed notifications on %s", NOTIFY_CHANNEL)
                # Changes committed while we were not listening: readers re-read the table now.
                self.wake()
                while not lost.is_set():
                    try:
                        await asyncio.wait_for(lost.wait(), timeout=self.health_interval)
                    except TimeoutError:
                        # A half-open TCP connection never reports termination; a query does.
                        await asyncio.wait_for(connection.execute("SELECT 1"), timeout=5)
                log.warning("change-feed listener connection closed; reconnecting")
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database went away or refused us: retry later
                log.warning("change-feed listener failed (%s: %s); retrying in %.1fs", type(exc).__name__, exc, delay)
            finally:
                self._listening = False
                if connection is not None and not connection.is_closed():
                    connection.terminate()
            self.wake()  # readers switch to polling until we are back
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.reconnect_max)


_SHARED: dict[tuple[str, int], FeedWaker] = {}


def shared_waker(database_url: str) -> FeedWaker:
    """The process-wide waker of a database in the running event loop (one LISTEN connection for all readers)."""
    key = (database_url, id(asyncio.get_running_loop()))
    waker = _SHARED.get(key)
    if waker is None:
        # Drop wakers of event loops that have finished (tests start several loops in one process).
        for stale in [k for k, w in _SHARED.items() if w.readers == 0 and k[0] == database_url]:
            del _SHARED[stale]
        waker = _SHARED[key] = FeedWaker(database_url)
    return waker
