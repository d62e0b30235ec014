"""Collector: reads the files jobs write from where it left off and turns lines into evidence (SPEC §4.2).

Which files: each live attempt's StdOut/StdErr, and files in `RECOVERY_LOG_DIRS` whose names
contain a tracked Slurm job id (`app.domain.detection.association.job_file_name`). Each file is a LogSource
row holding the reader's whole position, so a restart continues where the last one stopped; the
reader's event identity (path, inode, offset, line hash) plus insert-or-ignore keeps re-read bytes
from being recorded twice. File I/O runs in a thread; wake-ups come from inotify (watchfiles) with
polling as the fallback.

A tick costs what changed, not what is tracked (SPEC §9): positions and attempt associations stay
in memory between ticks; after the first full discovery only the jobs that new change-feed entries
name (or whose ended attempts leave their grace period) are reloaded; inotify names the files to
read; a tick's reads are applied in one transaction with bulk lookups.

This module is the Service that ties the parts together (wake-ups, the tick, inotify): which files
to track is `worker.collector.discovery`, reading them `worker.collector.reading`, storing what was
read `worker.collector.recording`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
from collections.abc import Callable, Iterable
from typing import Any

from app.domain.detection.rules_builtin import default_ruleset
from app.domain.detection.rules_file import parse_signature_config
from app.domain.detection.signatures import RuleSet
from app.infra import metrics
from app.infra.config import Settings
from app.infra.context import AppContext
from app.infra.db import utcnow
from app.jobfiles.reader import LogTailer
from worker.collector.discovery import Discovery, JobInfo, Tracked
from worker.collector.reading import FileRead, read_files
from worker.collector.recording import Recorder
from worker.service import Service

log = logging.getLogger("recovery.collector")


def load_ruleset(settings: Settings) -> RuleSet:
    """The rules the service runs with; a broken signatures file raises, so the service refuses to start."""
    if not settings.signatures_file:
        return default_ruleset()
    with open(settings.signatures_file, encoding="utf-8") as handle:
        return parse_signature_config(handle.read())


class Collector(Service):
    """Tracks live attempts' log files, reads them incrementally, records crash/checkpoint evidence."""

    name = "collector"

    def __init__(
        self,
        ctx: AppContext,
        *,
        tailer: LogTailer | None = None,
        clock: Callable[[], dt.datetime] = utcnow,
        use_inotify: bool | None = None,
    ) -> None:
        super().__init__(interval=min(1.0, ctx.settings.collector_poll_interval))
        self.ctx = ctx
        self.settings = ctx.settings
        # One tailer per process: rules compiled once (a broken signatures file raises here).
        self.tailer = tailer or LogTailer(load_ruleset(ctx.settings))
        self.clock = clock
        self.use_inotify = self.settings.collector_inotify if use_inotify is None else use_inotify
        self.on_anomaly: list[Callable[[], None]] = []
        self.discovery = Discovery(ctx, self.tailer)
        self.recorder = Recorder(ctx)
        self._dirty: set[str] = set()
        self._poked = True
        self._poll_at: dt.datetime | None = None
        self._retry_all = False
        self._watch_task: asyncio.Task[None] | None = None
        self._watch_dirs: frozenset[str] = frozenset()
        self._watch_stop: asyncio.Event | None = None
        self.last_tick: dict[str, Any] = {}

    @property
    def tracked(self) -> dict[int, Tracked]:
        """The open log sources being read, by source id."""
        return self.discovery.tracked

    @property
    def jobs(self) -> dict[int, JobInfo]:
        """The jobs whose files are tracked, by job id."""
        return self.discovery.jobs

    # ---- wake-ups ---------------------------------------------------------------------------

    def poke(self) -> None:
        """Jobs or attempts changed (the observer calls this): rediscover files, retry waiting events."""
        self._poked = True
        self._retry_all = True
        self.wake()

    def _notify_anomaly(self) -> None:
        for callback in self.on_anomaly:
            try:
                callback()
            except Exception:  # a listener's bug must not stop collection
                log.exception("anomaly listener failed")

    # ---- the tick ---------------------------------------------------------------------------

    async def tick(self) -> None:
        now = self.clock()
        poll = self._poll_at is None or now >= self._poll_at
        if poll:
            self._poll_at = now + dt.timedelta(seconds=self.settings.collector_poll_interval)
            self.discovery.rescan |= await asyncio.to_thread(self.discovery.log_dirs_changed)  # one stat per directory
        if self.discovery.full_refresh_due(now):
            self._poked = False
            await self.refresh(now)
        elif self._poked or self.discovery.changes_due(now):
            self._poked = False
            await self.refresh_changes(now)
        if poll:
            candidates = list(self.tracked.values())
        else:  # only what inotify named, and final reads
            ids = {i for path in self._dirty for i in self.discovery.by_path.get(path, ())}
            candidates = [self.tracked[i] for i in sorted(ids)] + [
                t for t in self.tracked.values() if t.closing and t.source_id not in ids
            ]
        if self._dirty:
            self._dirty.difference_update(t.path for t in candidates)
        reads, left = await asyncio.to_thread(read_files, self.tailer, candidates, self.discovery.access_of)
        self._dirty.update(left)
        unfinished = len(left)
        anomalies = 0
        if reads:
            anomalies += await self._apply(reads, now)
        free, self._retry_all = self._retry_all, False
        anomalies += await self.recorder.retry_pending(now, free=free)
        if self.use_inotify:
            self._ensure_watching()
        wall = now.timestamp()
        for read in reads:
            metrics.COLLECTOR_BYTES_READ.inc(read.bytes_read)
            if read.bytes_read and read.tracked.mtime:
                metrics.COLLECTOR_READ_LAG.observe(max(0.0, wall - read.tracked.mtime))
        metrics.COLLECTOR_FILES_TRACKED.set(len(self.tracked))
        self.last_tick = {
            "read": len(reads),
            "candidates": len(candidates),
            "unfinished": unfinished,
            "anomalies": anomalies,
        }
        if anomalies:
            self._notify_anomaly()
        if unfinished or self._dirty:
            # Service clears its wake flag after tick() returns; set it again right after that.
            asyncio.get_running_loop().call_soon(self.wake)

    async def on_stop(self) -> None:
        if self._watch_stop is not None:
            self._watch_stop.set()
        if self._watch_task is not None:
            self._watch_task.cancel()
            await asyncio.gather(self._watch_task, return_exceptions=True)
            self._watch_task = None
        self.tailer.close()

    async def refresh(self, now: dt.datetime | None = None) -> None:
        """Bring the tracked set in line with every live attempt and the log directories (at start; a safety net)."""
        await self.discovery.refresh(now or self.clock())

    async def refresh_changes(self, now: dt.datetime | None = None) -> None:
        """Reload only the jobs new change-feed entries name (and those leaving their grace period); add new files."""
        await self.discovery.refresh_changes(now or self.clock())

    async def _apply(self, reads: list[FileRead], now: dt.datetime) -> int:
        """Store the reads; advance the positions of those stored and let go of files read for the last time."""
        anomalies, applied = await self.recorder.apply(reads, self.jobs, now)
        for read in applied:
            tracked = read.tracked
            tracked.read_from = read.position
            if tracked.closing:
                self.discovery.forget(tracked.source_id)
        return anomalies

    # ---- inotify ----------------------------------------------------------------------------

    def _ensure_watching(self) -> None:
        dirs = frozenset(d for d in self.discovery.tracked_dirs() if os.path.isdir(d))
        if dirs == self._watch_dirs and self._watch_task is not None and not self._watch_task.done():
            return
        if self._watch_stop is not None:
            self._watch_stop.set()
        self._watch_dirs = dirs
        if not dirs:
            return
        self._watch_stop = asyncio.Event()
        self._watch_task = asyncio.create_task(self._watch(dirs, self._watch_stop), name="collector:inotify")

    async def _watch(self, dirs: Iterable[str], stop: asyncio.Event) -> None:
        from watchfiles import awatch

        log_dirs = {os.path.abspath(d) for d in self.settings.log_dirs}
        try:
            async for changes in awatch(
                *sorted(dirs),
                watch_filter=None,
                debounce=50,
                step=10,
                stop_event=stop,
                recursive=False,
                rust_timeout=500,
                ignore_permission_denied=True,
            ):
                for _, path in changes:
                    self._dirty.add(path)
                    if path not in self.discovery.by_path and os.path.dirname(path) in log_dirs:
                        self.discovery.rescan = True  # a new file in a log directory: look for it
                self.wake()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # inotify limits, vanished directories: polling still covers everything
            log.warning(
                "file-change notifications stopped (%s); polling every %.1f s",
                exc,
                self.settings.collector_poll_interval,
            )
