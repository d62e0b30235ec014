"""Collector: reads the files jobs write from where it left off and turns lines into evidence (SPEC §4.2).

Which files: each live attempt's StdOut/StdErr, and files in `RECOVERY_LOG_DIRS` whose names
contain a tracked Slurm job id (`app.domain.association.job_file_name`). Each file is a LogSource
row holding the reader's whole position, so a restart continues where the last one stopped; the
reader's event identity (path, inode, offset, line hash) plus insert-or-ignore keeps re-read bytes
from being recorded twice. File I/O runs in a thread; wake-ups come from inotify (watchfiles) with
polling as the fallback.

A tick costs what changed, not what is tracked (SPEC §9): positions and attempt associations stay
in memory between ticks; after the first full discovery only the jobs that new change-feed entries
name (or whose ended attempts leave their grace period) are reloaded; inotify names the files to
read; a tick's reads are applied in one transaction with bulk lookups.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.config import Settings
from app.context import AppContext
from app.db import utcnow
from app.domain import association as assoc
from app.domain.progress import ProgressState
from app.domain.signature_config import parse_signature_config
from app.domain.signature_defaults import default_ruleset
from app.domain.signatures import CheckpointEvent, CrashSignature, ProgressMarker, RuleSet, ThroughputSample
from app.evidence import service as evidence
from app.evidence.models import LogSource
from app.feed import service as feed
from app.jobs import service as jobs
from app.jobs.models import Attempt, Job, Policy
from app.logs.reader import FilePosition, LogEvent, LogTailer, ReadResult
from worker.service import Service

log = logging.getLogger("recovery.collector")

REFRESH_SECONDS = 15.0  # read the change feed at least this often even without a wake-up from the observer
FULL_REFRESH_SECONDS = 600.0  # reload every live job now and then: a safety net for changes made without the feed
CHANGE_TOPICS = ("attempt", "job")
IN_CHUNK = 500  # ids per IN (...) list
MAX_FILES_PER_TICK = 2000
MAX_BYTES_PER_TICK = 512 * 1024 * 1024
LAST_READ_TOUCH = dt.timedelta(seconds=60)  # how stale last_read_at may get while a file is idle
NEW_FILE_NOTES = ("truncated", "rotated", "deleted")


def load_ruleset(settings: Settings) -> RuleSet:
    """The rules the service runs with; a broken signatures file raises, so the service refuses to start."""
    if not settings.signatures_file:
        return default_ruleset()
    with open(settings.signatures_file, encoding="utf-8") as handle:
        return parse_signature_config(handle.read())


@dataclass
class AttemptInfo:
    """What the collector caches about one attempt between refreshes."""

    id: int
    index: int
    state: str
    start: dt.datetime | None
    end: dt.datetime | None
    paths: tuple[str, ...]

    @property
    def window(self) -> assoc.AttemptWindow:
        return assoc.AttemptWindow(self.index, self.start, self.end)


@dataclass
class JobInfo:
    """A tracked job: its attempts and the policy switches the collector needs."""

    id: int
    slurm_job_id: int
    shared: bool
    straggler: bool
    attempts: list[AttemptInfo] = field(default_factory=list)

    def windows(self) -> list[assoc.AttemptWindow]:
        return [a.window for a in self.attempts]


@dataclass
class Tracked:
    """One open LogSource as the collector holds it in memory."""

    source_id: int
    path: str
    job_id: int | None
    attempt_id: int | None
    shared: bool
    position: FilePosition
    mtime: float | None = None
    closing: bool = False  # final read pending, then stop tracking


@dataclass
class FileRead:
    """All reads of one file in one tick, merged."""

    tracked: Tracked
    results: list[ReadResult]

    @property
    def position(self) -> FilePosition:
        return self.results[-1].position

    @property
    def events(self) -> list[LogEvent]:
        return [e for r in self.results for e in r.events]

    @property
    def notes(self) -> list[str]:
        return [n for r in self.results for n in r.notes]

    @property
    def bytes_read(self) -> int:
        return sum(r.bytes_read for r in self.results)


class Collector(Service):
    """Tracks live attempts' log files, reads them incrementally, records crash/checkpoint evidence."""

    name = "collector"

    def __init__(self, ctx: AppContext, *, tailer: LogTailer | None = None, clock: Callable[[], dt.datetime] = utcnow,
                 use_inotify: bool | None = None) -> None:
        super().__init__(interval=min(1.0, ctx.settings.collector_poll_interval))
        self.ctx = ctx
        self.settings = ctx.settings
        # One tailer per process: rules compiled once (a broken signatures file raises here).
        self.tailer = tailer or LogTailer(load_ruleset(ctx.settings))
        self.clock = clock
        self.use_inotify = self.settings.collector_inotify if use_inotify is None else use_inotify
        self.on_anomaly: list[Callable[[], None]] = []
        self.tracked: dict[int, Tracked] = {}
        self.jobs: dict[int, JobInfo] = {}
        self._by_path: dict[str, set[int]] = {}  # path -> tracked source ids (one path may serve several jobs)
        self._by_job: dict[int, set[int]] = {}  # job id -> tracked source ids
        self._dirty: set[str] = set()
        self._poked = True
        self._rescan = True  # a log directory may hold files not seen yet
        self._refresh_at: dt.datetime | None = None
        self._full_refresh_at: dt.datetime | None = None
        self._feed_cursor: int | None = None  # the change-feed id the in-memory jobs are current with
        self._grace_ends: dict[int, dt.datetime] = {}  # job id -> when an ended attempt of it leaves its grace period
        # Log directory -> (mtime_ns, job ids matched against, matching files): names are parsed again only after a change.
        self._listings: dict[str, tuple[int, frozenset[int], list[tuple[str, str, tuple[int, int | None]]]]] = {}
        self._tracked_dirs: frozenset[str] | None = None  # directories of tracked files (None: recompute)
        self._poll_at: dt.datetime | None = None
        self._retry_all = False
        self._watch_task: asyncio.Task[None] | None = None
        self._watch_dirs: frozenset[str] = frozenset()
        self._watch_stop: asyncio.Event | None = None
        self.last_tick: dict[str, Any] = {}

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
            self._rescan |= await asyncio.to_thread(self._log_dirs_changed)  # one stat per directory
        if self._feed_cursor is None or self._full_refresh_at is None or now >= self._full_refresh_at:
            self._poked = False
            await self.refresh(now)
        elif self._poked or self._rescan or self._refresh_at is None or now >= self._refresh_at or self._grace_due(now):
            self._poked = False
            await self.refresh_changes(now)
        if poll:
            candidates = list(self.tracked.values())
        else:  # only what inotify named, and final reads
            ids = {i for path in self._dirty for i in self._by_path.get(path, ())}
            candidates = [self.tracked[i] for i in sorted(ids)] + [t for t in self.tracked.values() if t.closing and t.source_id not in ids]
        self._dirty.difference_update(t.path for t in candidates)
        reads, left = await asyncio.to_thread(self._read_files, candidates[:MAX_FILES_PER_TICK])
        left += [t.path for t in candidates[MAX_FILES_PER_TICK:]]
        self._dirty.update(left)
        unfinished = len(left)
        anomalies = 0
        if reads:
            anomalies += await self._apply(reads, now)
        anomalies += await self._retry_pending(now)
        if self.use_inotify:
            self._ensure_watching()
        self.last_tick = {"read": len(reads), "candidates": len(candidates), "unfinished": unfinished, "anomalies": anomalies}
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

    # ---- discovery --------------------------------------------------------------------------

    async def refresh(self, now: dt.datetime | None = None) -> None:
        """Bring the tracked set in line with every live attempt and the log directories (at start; a safety net)."""
        now = now or self.clock()
        grace = dt.timedelta(seconds=self.settings.collector_ended_grace)
        async with self.ctx.sessions() as session, session.begin():
            cursor = await feed.latest_id(session)  # read first: a change committed meanwhile is read again, never missed
            self.jobs = await self._live_jobs(session, now - grace)
            self._grace_ends = {}
            for job in self.jobs.values():
                self._note_grace(job, now, grace)
            wanted = self._wanted_sources(now, grace, self.jobs.values())
            for key, attempt_id in (await asyncio.to_thread(self._scan_log_dirs)).items():
                wanted.setdefault(key, attempt_id)
            await self._sync_sources(session, wanted, now, None)
        self._feed_cursor, self._rescan = cursor, False
        self._refresh_at = now + dt.timedelta(seconds=REFRESH_SECONDS)
        self._full_refresh_at = now + dt.timedelta(seconds=FULL_REFRESH_SECONDS)

    async def refresh_changes(self, now: dt.datetime | None = None) -> None:
        """Reload only the jobs new change-feed entries name (and those leaving their grace period); add new files."""
        now = now or self.clock()
        grace = dt.timedelta(seconds=self.settings.collector_ended_grace)
        async with self.ctx.sessions() as session, session.begin():
            cursor, scope = await self._changed_jobs(session, self._feed_cursor or 0)
            scope |= self._grace_due(now)
            if scope:
                fresh = await self._live_jobs(session, now - grace, scope)
                for job_id in scope:
                    self.jobs.pop(job_id, None)
                    self._grace_ends.pop(job_id, None)
                self.jobs.update(fresh)
                for job in fresh.values():
                    self._note_grace(job, now, grace)
            found: dict[tuple[str, int], int | None] = {}
            if self._rescan or scope:
                found = await asyncio.to_thread(self._scan_log_dirs)
                scope |= {job_id for (path, job_id) in found if not self._tracks(path, job_id)}  # a new file joins this round
            if scope:
                wanted = self._wanted_sources(now, grace, [self.jobs[j] for j in scope if j in self.jobs])
                for key, attempt_id in found.items():
                    if key[1] in scope:
                        wanted.setdefault(key, attempt_id)
                await self._sync_sources(session, wanted, now, scope)
        self._feed_cursor, self._rescan = cursor, False
        self._refresh_at = now + dt.timedelta(seconds=REFRESH_SECONDS)

    async def _changed_jobs(self, session: AsyncSession, after: int) -> tuple[int, set[int]]:
        """(newest feed id read, ids of jobs with job or attempt changes after `after`): a query per 500 entries."""
        job_ids: set[int] = set()
        attempt_ids: set[int] = set()
        while True:
            entries = await feed.read_since(session, after_id=after, topics=CHANGE_TOPICS, limit=IN_CHUNK)
            for entry in entries:
                after = entry.id
                if entry.entity_id is not None and entry.cluster in (None, self.settings.cluster):
                    (job_ids if entry.topic == "job" else attempt_ids).add(entry.entity_id)
            if len(entries) < IN_CHUNK:
                break
        ids = sorted(attempt_ids)
        for start in range(0, len(ids), IN_CHUNK):
            job_ids.update((await session.scalars(select(Attempt.job_id).where(Attempt.id.in_(ids[start:start + IN_CHUNK])))).all())
        return after, job_ids

    def _note_grace(self, job: JobInfo, now: dt.datetime, grace: dt.timedelta) -> None:
        """Remember when an ended attempt's files stop being read: the clock decides that, not a change."""
        ends = [a.end + grace for a in job.attempts if a.state not in jobs.ACTIVE_STATES and a.end is not None and a.end + grace > now]
        if ends:
            self._grace_ends[job.id] = min(ends)

    def _grace_due(self, now: dt.datetime) -> set[int]:
        return {job_id for job_id, at in self._grace_ends.items() if at <= now}

    def _tracks(self, path: str, job_id: int) -> bool:
        return any(self.tracked[i].job_id == job_id for i in self._by_path.get(path, ()))

    async def _live_jobs(self, session: AsyncSession, ended_after: dt.datetime, only: set[int] | None = None) -> dict[int, JobInfo]:
        query = (
            select(Attempt, Job)
            .join(Job, Job.id == Attempt.job_id)
            .where(Job.cluster == self.settings.cluster, Job.retired_at.is_(None), Job.enrolment == "ENROLLED")
            .where(Attempt.state.in_(sorted(jobs.ACTIVE_STATES)) | Attempt.end_time.is_(None) | (Attempt.end_time > ended_after))
        )
        rows: list[Any] = []
        if only is None:
            rows = list((await session.execute(query)).all())
        else:
            scope = sorted(only)
            for start in range(0, len(scope), IN_CHUNK):
                rows += (await session.execute(query.where(Job.id.in_(scope[start:start + IN_CHUNK])))).all()
        job_ids = sorted({job.id for _, job in rows})
        live: dict[int, JobInfo] = {}
        if not job_ids:
            return live
        policies: dict[int, dict[str, Any]] = {}
        every: list[Attempt] = []
        step = len(job_ids) if only is None else IN_CHUNK  # the full load keeps its one query per table
        for start in range(0, len(job_ids), step):
            chunk = job_ids[start:start + step]
            policies.update({p.job_id: p.effective or {} for p in (await session.scalars(select(Policy).where(Policy.job_id.in_(chunk)))).all()})
            # All attempts of these jobs (also ended ones): shared-path attribution needs every window.
            every += (await session.scalars(select(Attempt).where(Attempt.job_id.in_(chunk)).order_by(Attempt.attempt_index))).all()
        for _, job in rows:
            if job.id not in live:
                config = policies.get(job.id, {}).get("anomaly_detection_config") or {}
                live[job.id] = JobInfo(job.id, job.slurm_job_id, bool(job.shared_log_paths), bool(config.get("straggler_detection_enabled")))
        for attempt in every:
            paths = tuple(dict.fromkeys(p for p in (attempt.stdout_path, attempt.stderr_path) if p))
            live[attempt.job_id].attempts.append(AttemptInfo(attempt.id, attempt.attempt_index, attempt.state, attempt.start_time, attempt.end_time, paths))
        return live

    def _attempt_live(self, attempt: AttemptInfo, now: dt.datetime, grace: dt.timedelta) -> bool:
        return attempt.state in jobs.ACTIVE_STATES or attempt.end is None or attempt.end > now - grace

    def _wanted_sources(self, now: dt.datetime, grace: dt.timedelta, of: Iterable[JobInfo]) -> dict[tuple[str, int], int | None]:
        """(path, job id) -> owning attempt id (None: attributed per line) for every file of these jobs to read."""
        wanted: dict[tuple[str, int], int | None] = {}
        for job in of:
            for attempt in job.attempts:
                if not self._attempt_live(attempt, now, grace):
                    continue
                for path in attempt.paths:
                    key = (path, job.id)
                    if job.shared:
                        wanted[key] = None
                    else:
                        wanted.setdefault(key, attempt.id)  # the earliest attempt recorded with the path owns it
        return wanted

    def _log_dirs_changed(self) -> bool:
        """A log directory's entries changed since it was listed (the polling fallback's way to see new files)."""
        for directory in self.settings.log_dirs:
            listed = self._listings.get(directory)
            try:
                if listed is None or os.stat(directory).st_mtime_ns != listed[0]:
                    return True
            except OSError:
                if listed is not None:
                    return True
        return False

    def _matching_files(self, directory: str, ids: frozenset[int]) -> list[tuple[str, str, tuple[int, int | None]]]:
        """(name, path, job_file_name match) of a log directory's files; listed and parsed again only after a change."""
        try:
            before = os.stat(directory).st_mtime_ns
        except OSError:
            self._listings.pop(directory, None)
            return []
        listed = self._listings.get(directory)
        if listed is not None and listed[0] == before and listed[1] == ids:
            return listed[2]
        try:
            with os.scandir(directory) as entries:
                names = [(entry.name, entry.path) for entry in entries if entry.is_file()]
        except OSError:
            return []
        matches = [(name, path, match) for name, path in names if (match := assoc.job_file_name(name, ids)) is not None]
        # A change within the filesystem's timestamp granularity of the listing could go unseen: cache only settled listings.
        if time.time_ns() - before > 2_000_000_000:
            self._listings[directory] = (before, ids, matches)
        else:
            self._listings.pop(directory, None)
        return matches

    def _scan_log_dirs(self) -> dict[tuple[str, int], int | None]:
        """Files in the configured log directories named after a tracked job (see job_file_name)."""
        by_slurm_id = {job.slurm_job_id: job for job in self.jobs.values()}
        ids = frozenset(by_slurm_id)
        found: dict[tuple[str, int], int | None] = {}
        if not ids:
            return found
        for directory in self.settings.log_dirs:
            for name, path, match in self._matching_files(directory, ids):
                job = by_slurm_id[match[0]]
                key = (path, job.id)
                if match[1] is None:
                    found[key] = None
                else:
                    attempt = next((a for a in job.attempts if a.index == match[1]), None)
                    if attempt is not None:  # not registered yet: picked up (from byte 0) once it is
                        found[key] = attempt.id
        return found

    async def _sync_sources(self, session: AsyncSession, wanted: dict[tuple[str, int], int | None], now: dt.datetime,
                            scope: set[int] | None) -> None:
        """Create, reopen, close and (un)track log sources; `scope`: only these jobs' sources (None: all)."""
        job_ids = sorted({job_id for _, job_id in wanted} if scope is None else scope)
        rows: list[LogSource] = []
        for start in range(0, len(job_ids), IN_CHUNK):
            rows += (await session.scalars(select(LogSource).where(LogSource.job_id.in_(job_ids[start:start + IN_CHUNK])))).all()
        if scope is None:
            rows += (await session.scalars(select(LogSource).where(LogSource.closed_at.is_(None)))).all()
        existing = {(row.path, row.job_id): row for row in rows}
        for (path, job_id), attempt_id in wanted.items():
            row = existing.get((path, job_id))
            if row is None:
                row = LogSource(path=path, job_id=job_id, attempt_id=attempt_id, shared=attempt_id is None, offset=0, line_number=0)
                session.add(row)
                existing[(path, job_id)] = row
            elif row.closed_at is not None and row.attempt_id is None:
                row.closed_at = None  # a shared file of a job that runs again
        await session.flush()
        live_ids: set[int] = set()
        for key, row in existing.items():
            if row.closed_at is not None:
                continue
            live = key in wanted and (row.attempt_id is None or row.attempt_id == wanted[key] or self._owner_live(row, now))
            live_ids.add(row.id)
            tracked = self.tracked.get(row.id)
            if tracked is None:
                tracked = self._track(Tracked(row.id, row.path, row.job_id, row.attempt_id, row.attempt_id is None, _position_of(row)))
            tracked.closing = not live
        in_scope = self.tracked if scope is None else {i for job_id in scope for i in self._by_job.get(job_id, ())}
        for source_id in [s for s in in_scope if s not in live_ids]:
            self._forget(source_id)

    def _owner_live(self, row: LogSource, now: dt.datetime) -> bool:
        job = self.jobs.get(row.job_id or -1)
        attempt = next((a for a in job.attempts if a.id == row.attempt_id), None) if job else None
        return attempt is not None and self._attempt_live(attempt, now, dt.timedelta(seconds=self.settings.collector_ended_grace))

    def _track(self, tracked: Tracked) -> Tracked:
        self.tracked[tracked.source_id] = tracked
        self._by_path.setdefault(tracked.path, set()).add(tracked.source_id)
        self._by_job.setdefault(tracked.job_id or -1, set()).add(tracked.source_id)
        self._tracked_dirs = None
        return tracked

    def _forget(self, source_id: int) -> None:
        tracked = self.tracked.pop(source_id, None)
        if tracked is None:
            return
        self._tracked_dirs = None
        for index, key in ((self._by_path, tracked.path), (self._by_job, tracked.job_id or -1)):
            ids = index.get(key)  # type: ignore[attr-defined]
            if ids is not None:
                ids.discard(source_id)
                if not ids:
                    del index[key]  # type: ignore[attr-defined]
        if tracked.path not in self._by_path:
            self.tailer.close(tracked.path)

    # ---- reading (in a worker thread) -------------------------------------------------------

    def _read_files(self, candidates: list[Tracked]) -> tuple[list[FileRead], list[str]]:
        """Read the candidates (in a worker thread; touches only the tailer and the Tracked objects)."""
        reads: list[FileRead] = []
        budget = MAX_BYTES_PER_TICK
        unfinished: list[str] = []
        for tracked in candidates:
            if budget <= 0:
                unfinished.append(tracked.path)
                continue
            if not tracked.closing and self._unchanged(tracked):
                continue
            results: list[ReadResult] = []
            position = tracked.position
            while True:
                try:
                    result = self.tailer.read(position)
                except OSError as exc:  # permissions changed, I/O error on a network filesystem
                    log.warning("reading %s failed: %s", tracked.path, exc)
                    break
                results.append(result)
                position = result.position
                budget -= result.bytes_read
                if not result.more:
                    break
                if budget <= 0:
                    unfinished.append(tracked.path)
                    break
            if results:
                reads.append(FileRead(tracked, results))
        return reads, unfinished

    def _unchanged(self, tracked: Tracked) -> bool:
        """Nothing to read: same file, same size as our offset, same mtime (saves the open and head check)."""
        position = tracked.position
        try:
            st = os.stat(tracked.path)
        except OSError:
            return position.inode is None  # still missing; a vanished file must be read to notice it
        same = (st.st_ino, st.st_dev) == (position.inode, position.device) and st.st_size == position.offset and st.st_mtime == tracked.mtime
        tracked.mtime = st.st_mtime
        return same and not position.skipping

    # ---- applying what was read -------------------------------------------------------------

    async def _apply(self, reads: list[FileRead], now: dt.datetime) -> int:
        """Store positions and evidence: one transaction per tick; one per file only when that fails."""
        applied = reads
        try:
            async with self.ctx.sessions() as session, session.begin():
                loaded = await self._load_for(session, reads)  # held: the identity map keeps rows only weakly
                anomalies = 0
                for read in reads:
                    anomalies += await self._apply_one(session, read, now)
                del loaded
        except Exception:
            log.exception("applying %d file reads together failed; applying them one by one", len(reads))
            anomalies, applied = 0, []
            for read in reads:
                try:
                    async with self.ctx.sessions() as session, session.begin():
                        anomalies += await self._apply_one(session, read, now)
                    applied.append(read)
                except Exception:
                    log.exception("applying the read of %s failed; it is read again next time", read.tracked.path)
                    read.tracked.mtime = None
        for read in applied:
            tracked = read.tracked
            tracked.position = read.position
            if tracked.closing:
                self._forget(tracked.source_id)
        return anomalies

    @staticmethod
    async def _load_for(session: AsyncSession, reads: list[FileRead]) -> list[Any]:
        """The reads' log sources and owning attempts in two queries per 500 files (later gets hit the identity map)."""
        source_ids = sorted({read.tracked.source_id for read in reads})
        loaded: list[Any] = []
        for start in range(0, len(source_ids), IN_CHUNK):
            loaded += (await session.scalars(select(LogSource).where(LogSource.id.in_(source_ids[start:start + IN_CHUNK])))).all()
        owners = sorted({row.attempt_id for row in loaded if row.attempt_id is not None})
        for start in range(0, len(owners), IN_CHUNK):
            loaded += (await session.scalars(select(Attempt).where(Attempt.id.in_(owners[start:start + IN_CHUNK])))).all()
        return loaded

    async def _apply_one(self, session: AsyncSession, read: FileRead, now: dt.datetime) -> int:
        tracked = read.tracked
        row = await session.get(LogSource, tracked.source_id)
        if row is None:
            return 0
        position = read.position
        changed = _store_position(row, position)
        job = self.jobs.get(row.job_id or -1)
        owner = await session.get(Attempt, row.attempt_id) if row.attempt_id is not None else None
        replaced = any(note in NEW_FILE_NOTES for note in read.notes)
        anomalies = 0
        # Lines after a truncation of an ended attempt's own file were written by someone else.
        foreign = owner is not None and owner.state not in jobs.ACTIVE_STATES and "truncated" in read.notes
        for event in read.events:
            if not isinstance(event.signal, (CrashSignature, CheckpointEvent)):
                continue
            anomalies += await self._attribute(session, row, job, owner, _line_event(event), now, foreign=foreign)
        if read.bytes_read:
            latest = max((r.last_output_at for r in read.results if r.bytes_read and r.last_output_at), default=None)
            if latest is not None and (row.last_output_at is None or latest > row.last_output_at):
                row.last_output_at = latest
                changed = True
        if replaced:
            row.progress_offset = None
        for result in read.results:
            marker = result.latest_progress
            if marker is not None and isinstance(marker.signal, ProgressMarker):
                changed |= self._observe_progress(row, job, marker)
            sample = result.latest_throughput
            if sample is not None and isinstance(sample.signal, ThroughputSample) and job is not None and job.straggler and self.settings.straggler_enabled:
                attempt = owner or await self._attempt_for_line(session, job, sample)
                if attempt is not None and await self._observe_throughput(session, row, attempt, sample):
                    anomalies += 1
        if changed or read.bytes_read or row.last_read_at is None or now - row.last_read_at > LAST_READ_TOUCH:
            row.last_read_at = now
        if tracked.closing or (foreign and owner is not None):
            row.closed_at = now
            tracked.closing = True
        return anomalies

    def _observe_progress(self, row: LogSource, job: JobInfo | None, marker: LogEvent) -> bool:
        """Arm the hang detector for the file (and the attempt the marker belongs to)."""
        state = ProgressState(armed=row.progress_phase is not None, phase=row.progress_phase, marker_offset=row.progress_offset, marker_at=row.progress_at)
        at = marker.source_time or marker.read_at
        new = state.observe(marker.signal, line_number=marker.line_number, offset=marker.offset, at=at)  # type: ignore[arg-type]
        if new is state:
            return False
        row.progress_phase, row.progress_offset, row.progress_line_number = new.phase, new.marker_offset, new.marker_line
        row.progress_at, row.progress_line = new.marker_at, marker.text[:2000]
        if row.attempt_id is not None:
            row.progress_attempt_id = row.attempt_id
        elif job is not None:
            decision = assoc.attribute_shared_event(label=marker.attempt, source_time=marker.source_time, windows=job.windows(), now=marker.read_at)
            attempt = next((a for a in job.attempts if a.index == decision.attempt_index), None)
            row.progress_attempt_id = attempt.id if attempt else None
        return True

    async def _attempt_for_line(self, session: AsyncSession, job: JobInfo, event: LogEvent) -> Attempt | None:
        decision = assoc.attribute_shared_event(label=event.attempt, source_time=event.source_time, windows=job.windows(), now=event.read_at)
        info = next((a for a in job.attempts if a.index == decision.attempt_index), None)
        return await session.get(Attempt, info.id) if info else None

    async def _observe_throughput(self, session: AsyncSession, row: LogSource, attempt: Attempt, sample: LogEvent) -> bool:
        assert isinstance(sample.signal, ThroughputSample)
        return await evidence.observe_throughput(
            session, source=row, attempt=attempt, values=sample.signal.values, at=sample.source_time or sample.read_at,
            line_number=sample.line_number, line=sample.text, source_time=sample.source_time,
            drop_ratio=self.settings.straggler_drop_ratio, duration=self.settings.straggler_duration,
        ) is not None

    async def _attribute(self, session: AsyncSession, row: LogSource, job: JobInfo | None, owner: Attempt | None,
                         event: evidence.LineEvent, now: dt.datetime, *, foreign: bool = False) -> int:
        """Record an event on its attempt, keep it waiting, or drop it (with an audit event)."""
        if owner is not None:
            ended = owner.state not in jobs.ACTIVE_STATES
            if foreign or (ended and assoc.written_after_end(source_time=event.source_time, end=owner.end_time)):
                job_row = await session.get(Job, owner.job_id)
                await evidence.drop_event(session, job=job_row, log_path=row.path, event=event, reason=assoc.AFTER_ATTEMPT_END, tries=0,
                                          attempt_index=owner.attempt_index)
                return 0
            recorded = await evidence.record_line_event(session, attempt=owner, event=event)
            return int(recorded is not None and isinstance(event.signal, CrashSignature))
        windows = job.windows() if job else await _windows_of(session, row.job_id)
        decision = assoc.attribute_shared_event(label=event.attempt_label, source_time=event.source_time, windows=windows, now=now)
        if decision.decided:
            attempt = await session.scalar(select(Attempt).where(Attempt.job_id == row.job_id, Attempt.attempt_index == decision.attempt_index))
            if attempt is not None:
                recorded = await evidence.record_line_event(session, attempt=attempt, event=event)
                return int(recorded is not None and isinstance(event.signal, CrashSignature))
        delay = assoc.next_retry_delay(0) or 0.0
        await evidence.defer_event(session, source=row, event=event, reason=decision.reason or assoc.NO_ATTEMPTS,
                                   next_try_at=now + dt.timedelta(seconds=delay))
        return 0

    # ---- waiting events ---------------------------------------------------------------------

    async def _retry_pending(self, now: dt.datetime) -> int:
        """Redeliver undecided events: due ones count a try; a poke from the observer retries all for free."""
        free = self._retry_all
        self._retry_all = False
        anomalies = 0
        async with self.ctx.sessions() as session, session.begin():
            due = await evidence.due_pending(session, now=None if free else now)
            for pending, source in due:
                scheduled = pending.next_try_at <= now
                event = evidence.pending_to_event(pending, source.path)
                windows = await _windows_of(session, source.job_id)
                decision = assoc.attribute_shared_event(label=event.attempt_label, source_time=event.source_time, windows=windows, now=now)
                if decision.decided:
                    attempt = await session.scalar(select(Attempt).where(Attempt.job_id == source.job_id, Attempt.attempt_index == decision.attempt_index))
                    if attempt is not None:
                        recorded = await evidence.record_line_event(session, attempt=attempt, event=event)
                        anomalies += int(recorded is not None and isinstance(event.signal, CrashSignature))
                        await session.delete(pending)
                        continue
                if not scheduled:
                    continue
                pending.tries += 1
                pending.reason = decision.reason
                delay = assoc.next_retry_delay(pending.tries)
                if delay is None:
                    job = await session.get(Job, source.job_id) if source.job_id is not None else None
                    await evidence.drop_event(session, job=job, log_path=source.path, event=event, reason=decision.reason, tries=pending.tries)
                    await session.delete(pending)
                else:
                    pending.next_try_at = now + dt.timedelta(seconds=delay)
        return anomalies

    # ---- inotify ----------------------------------------------------------------------------

    def _ensure_watching(self) -> None:
        if self._tracked_dirs is None:  # recomputed only when the tracked set changed
            self._tracked_dirs = frozenset({os.path.dirname(path) or "." for path in self._by_path} | set(self.settings.log_dirs))
        dirs = frozenset(d for d in self._tracked_dirs if os.path.isdir(d))
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
            async for changes in awatch(*sorted(dirs), watch_filter=None, debounce=50, step=10, stop_event=stop, recursive=False,
                                        rust_timeout=500, ignore_permission_denied=True):
                for _, path in changes:
                    self._dirty.add(path)
                    if path not in self._by_path and os.path.dirname(path) in log_dirs:
                        self._rescan = True  # a new file in a log directory: look for it
                self.wake()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # inotify limits, vanished directories: polling still covers everything
            log.warning("file-change notifications stopped (%s); polling every %.1f s", exc, self.settings.collector_poll_interval)


async def _windows_of(session: AsyncSession, job_id: int | None) -> list[assoc.AttemptWindow]:
    if job_id is None:
        return []
    rows = (await session.scalars(select(Attempt).where(Attempt.job_id == job_id).order_by(Attempt.attempt_index))).all()
    return [assoc.AttemptWindow(a.attempt_index, a.start_time, a.end_time) for a in rows]


def _position_of(row: LogSource) -> FilePosition:
    return FilePosition(path=row.path, offset=row.offset or 0, inode=row.inode, device=row.device, head_digest=row.head_digest or "",
                        head_length=row.head_length or 0, line_number=row.line_number or 0, skipping=bool(row.skipping))


def _store_position(row: LogSource, position: FilePosition) -> bool:
    values = {"offset": position.offset, "inode": position.inode, "device": position.device, "head_digest": position.head_digest or None,
              "head_length": position.head_length, "line_number": position.line_number, "skipping": position.skipping}
    changed = False
    for name, value in values.items():
        if getattr(row, name) != value:
            setattr(row, name, value)
            changed = True
    return changed


def _line_event(event: LogEvent) -> evidence.LineEvent:
    return evidence.LineEvent(
        event_key=event.event_id, log_path=event.path, line_number=event.line_number, line=event.text, source_time=event.source_time,
        read_at=event.read_at, signal=event.signal, attempt_label=event.attempt,  # type: ignore[arg-type]
    )

