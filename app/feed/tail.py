"""One shared reader of the change feed per process, fanned out to every live subscriber (WebSocket and SSE).

Without it each subscriber polls the feed on its own: 1,000 viewers make 1,000 queries per wake-up. The
tail reads once per wake-up (all topics, in id order) into a bounded buffer of recent entries; each
subscriber takes the entries after its own position from that buffer, so every subscriber sees the same
entries in the same order. A subscriber whose position is older than the buffer (a reconnect with an old
`after`) reads its backlog from the database itself until it catches up, then joins the shared read.

    tail = shared_tail(settings.database_url, ctx.sessions)
    async with tail.subscriber(workflow_id=None) as sub:
        position = await sub.start(after)          # None: from now on
        while True:
            entries = await sub.next(position, topics)   # waits until there are some
            position = entries[-1].id                 # or sub.position

Rows the entries name (attempts, audit events, Advice) can be loaded once per process too: `rows()` keeps
what one subscriber loaded for the entries in the buffer, and concurrent askers share one query.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any

from app.feed import queries as feed_queries
from app.feed.listener import FeedWaker, shared_waker, stop_task
from app.infra.errors import retrying

log = logging.getLogger("recovery.feed")

BATCH = 500  # entries per read
KEEP = 20_000  # entries the buffer keeps for subscribers that fell behind
# At most one read per this many seconds: under a burst of writes the subscribers get a few larger batches,
# not one wake-up per committed change each (the fan-out's cost grows with wake-ups x subscribers).
MIN_INTERVAL = 0.2


class FeedReadFailed(RuntimeError):
    """The shared read of the change feed stopped on an error that is not a database outage."""


class FeedTail:
    """The process's shared read of one database's change feed (use shared_tail() for it)."""

    def __init__(
        self, sessions: Any, waker: FeedWaker, *, keep: int = KEEP, min_interval: float = MIN_INTERVAL
    ) -> None:
        self.sessions = sessions
        self.waker = waker
        self.keep = keep
        self.min_interval = min_interval
        self.ids: list[int] = []  # ids of the buffered entries, increasing
        self.entries: list[Any] = []
        self.base = 0  # every entry with base < id <= position is in the buffer
        self.position = 0
        self.started = False
        self.reads = 0  # feed reads so far (the bench and tests watch that they do not grow with subscribers)
        self._subscribers = 0
        self._task: asyncio.Task[None] | None = None
        # Who to wake for a batch: subscribers of one workflow only when the batch names it, the rest always.
        self._everyone: set[Subscriber] = set()
        self._by_workflow: dict[int, set[Subscriber]] = {}
        self._ready = asyncio.Event()
        self._rows: dict[tuple[str, int], asyncio.Future[Any]] = {}
        self.failure: Exception | None = None  # why the shared read stopped (not a database outage: that waits)

    @property
    def subscribers(self) -> int:
        return self._subscribers

    @contextlib.asynccontextmanager
    async def subscriber(self, workflow_id: int | None = None) -> AsyncIterator[Subscriber]:
        """A subscriber for the block (woken only for entries of `workflow_id` when given: it wants no others); the
        shared read runs while at least one is inside."""
        self._subscribers += 1
        if self._task is None or self._task.done():
            self._ready = asyncio.Event()
            self.failure = None
            self._task = asyncio.create_task(self._run(), name="feed-tail")
        subscriber = Subscriber(self)
        group = self._everyone if workflow_id is None else self._by_workflow.setdefault(workflow_id, set())
        group.add(subscriber)
        try:
            yield subscriber
        finally:
            group.discard(subscriber)
            if workflow_id is not None and not group:
                self._by_workflow.pop(workflow_id, None)
            self._subscribers -= 1
            if self._subscribers == 0:
                await self.stop()

    async def stop(self) -> None:
        """Stop the shared read and forget the buffer (it starts again with the next subscriber)."""
        task, self._task = self._task, None
        await stop_task(task)
        self.ids, self.entries, self._rows = [], [], {}
        self.started = False

    async def _latest(self) -> int:
        async with self.sessions() as session:
            return await feed_queries.latest_id(session)

    async def _read(self, after_id: int, topics: Iterable[str] | None = None) -> list[Any]:
        async with self.sessions() as session:
            return list(await feed_queries.read_since(session, after_id=after_id, topics=topics, limit=BATCH))

    async def _run(self) -> None:
        """Follow the feed; if the read fails for another reason than an outage, every subscriber gets the error
        (instead of waiting forever for entries no one will read), and the next subscriber starts a new read."""
        try:
            await self._follow()
        except Exception as exc:
            log.exception("the shared change-feed read stopped; its live subscribers end with an error")
            self.failure = exc
            self._ready.set()
            for subscriber in [*self._everyone, *(s for group in self._by_workflow.values() for s in group)]:
                subscriber.wake.set()

    def check(self) -> None:
        """Raise FeedReadFailed if the shared read has stopped."""
        if self.failure is not None:
            raise FeedReadFailed("the change feed could not be read") from self.failure

    async def _follow(self) -> None:
        """Read every new entry once per wake-up and wake the subscribers (forever; stop() cancels)."""
        async with self.waker.reader():
            self.position = self.base = await retrying(self._latest, what="feed tail start", logger=log)
            self.started = True
            self._ready.set()
            loop = asyncio.get_running_loop()
            while True:
                mark = self.waker.mark()
                read_at = loop.time()
                # While the database is away the subscribers wait; the tail goes on from its position.
                entries = await retrying(functools.partial(self._read, self.position), what="feed tail", logger=log)
                if entries:
                    self.reads += 1
                    self._append(entries)
                    if len(entries) == BATCH:
                        continue
                else:
                    self.reads += 1
                await self.waker.wait(mark)
                await asyncio.sleep(max(0.0, read_at + self.min_interval - loop.time()))

    def _append(self, entries: Sequence[Any]) -> None:
        self.ids.extend(entry.id for entry in entries)
        self.entries.extend(entries)
        self.position = entries[-1].id
        if len(self.ids) > self.keep:
            drop = len(self.ids) - self.keep
            self.base = self.ids[drop - 1]
            for entry in self.entries[:drop]:
                self._rows.pop((entry.topic, entry.id), None)
            del self.ids[:drop], self.entries[:drop]
        for subscriber in self._everyone:
            subscriber.wake.set()
        for workflow_id in {entry.workflow_id for entry in entries}:
            for subscriber in self._by_workflow.get(workflow_id, ()):
                subscriber.wake.set()

    async def rows(
        self, topic: str, entries: Sequence[Any], load: Callable[[list[int]], Awaitable[Sequence[Any]]]
    ) -> list[Any]:
        """The rows `entries` name (loaded by `load(entity ids)`, None where gone), shared by every subscriber
        asking for the same entries while they are buffered: one query per batch per process, not per subscriber."""
        missing = [entry for entry in entries if (topic, entry.id) not in self._rows]
        if missing:
            # Load the rest of the buffered batch of the same feed topic with them: the next subscribers (other
            # workflows, other filters) then find their rows here instead of each sending a query of its own.
            asked = {entry.id for entry in missing}
            start = bisect.bisect_left(self.ids, min(asked))
            missing += [
                entry
                for entry in self.entries[start : start + BATCH]
                if entry.topic == missing[0].topic
                and entry.entity_id is not None
                and entry.id not in asked
                and (topic, entry.id) not in self._rows
            ]
            loop = asyncio.get_running_loop()
            futures = {entry.id: loop.create_future() for entry in missing}
            for entry in missing:
                if entry.id >= self.base:  # only buffered entries are kept (an old backlog is loaded, not kept)
                    self._rows[(topic, entry.id)] = futures[entry.id]
            try:
                loaded = await load([entry.entity_id for entry in missing])
            except BaseException:
                for entry in missing:
                    self._rows.pop((topic, entry.id), None)
                    futures[entry.id].cancel()
                raise
            for entry, row in zip(missing, loaded, strict=True):
                futures[entry.id].set_result(row)
            local = {entry.id: futures[entry.id] for entry in missing}
        else:
            local = {}
        return [await (local.get(entry.id) or self._rows[(topic, entry.id)]) for entry in entries]


class Subscriber:
    """One live reader's view of the shared tail."""

    def __init__(self, tail: FeedTail) -> None:
        self.tail = tail
        self.position = 0
        self.wake = asyncio.Event()

    async def start(self, after: int | None) -> int:
        """The position to go on from: `after`, or the newest entry now."""
        tail = self.tail
        await tail._ready.wait()
        tail.check()
        self.position = tail.position if after is None else after
        return self.position

    async def next(self, topics: Iterable[str] | None = None) -> list[Any]:
        """The next entries after this subscriber's position (of `topics`; all when None), oldest first; waits until
        there is at least one entry of any topic (then the answer may be empty: the position moved on)."""
        tail = self.tail
        wanted = frozenset(topics) if topics is not None else None
        while True:
            tail.check()
            if self.position < tail.base:
                # Behind the buffer (reconnected with an old position): read the backlog directly.
                entries = await retrying(
                    functools.partial(tail._read, self.position, wanted), what="feed backlog", logger=log
                )
                if entries:
                    self.position = entries[-1].id
                    return entries
                self.position = max(self.position, tail.base)
                continue
            if self.position < tail.position:
                start = bisect.bisect_right(tail.ids, self.position)
                end = min(len(tail.ids), start + BATCH)
                batch = tail.entries[start:end]
                self.position = tail.ids[end - 1] if batch else tail.position
                if wanted is None:
                    return batch
                return [entry for entry in batch if entry.topic in wanted]
            self.wake.clear()
            await self.wake.wait()


_SHARED: dict[tuple[str, int], FeedTail] = {}


def shared_tail(database_url: str, sessions: Any) -> FeedTail:
    """The process-wide tail of a database in the running event loop."""
    key = (database_url, id(asyncio.get_running_loop()))
    tail = _SHARED.get(key)
    if tail is None:
        for stale in [k for k, t in _SHARED.items() if t.subscribers == 0 and k[0] == database_url]:
            del _SHARED[stale]
        tail = _SHARED[key] = FeedTail(sessions, shared_waker(database_url))
    return tail
