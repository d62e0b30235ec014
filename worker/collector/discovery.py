"""Which log files the collector reads: live attempts' files and matching files in the log directories.

The tracked set and the jobs it belongs to stay in memory between ticks. A full discovery loads
every live job (at start, and now and then as a safety net); after that only the jobs that new
change-feed entries name, or whose ended attempts leave their grace period, are reloaded (SPEC §9).
Log directories are listed again only after their modification time changed.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.domain.admission.policy import EffectivePolicy
from app.domain.control import states
from app.domain.detection import association as assoc
from app.evidence import queries as evidence_queries
from app.evidence import service as evidence
from app.feed import queries as feed_queries
from app.infra.context import AppContext
from app.infra.db import Session
from app.infra.sql import IN_CHUNK
from app.jobfiles.reader import FilePosition, LogEvent, LogTailer
from app.jobfiles.safe_open import AccessRule
from app.jobs import queries as job_queries

if TYPE_CHECKING:  # row types for annotations only: the SQL lives in the areas' queries
    from app.evidence.models import LogSource

REFRESH_SECONDS = 15.0  # read the change feed at least this often even without a wake-up from the observer
FULL_REFRESH_SECONDS = 600.0  # reload every live job now and then: a safety net for changes made without the feed
CHANGE_TOPICS = ("attempt", "job")
MAX_DIR_ENTRIES = 100_000  # names read from one log directory per listing (a directory of millions is cut here)

# (path, job id) -> owning attempt id (None: attributed per line)
Wanted = dict[tuple[str, int], int | None]


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
    user_id: int | None = None  # Slurm's numeric uid: the job's files are read with this user's rights only
    group_id: int | None = None
    user_name: str | None = None

    def windows(self) -> list[assoc.AttemptWindow]:
        return [a.window for a in self.attempts]

    def attempt_for_line(self, event: LogEvent) -> AttemptInfo | None:
        """The attempt a line of a shared file belongs to, when its label or time decides it now."""
        decision = assoc.attribute_shared_event(
            label=event.attempt, source_time=event.source_time, windows=self.windows(), now=event.read_at
        )
        return next((a for a in self.attempts if a.index == decision.attempt_index), None)


@dataclass
class Tracked:
    """One open LogSource as the collector holds it in memory."""

    source_id: int
    path: str
    job_id: int | None
    attempt_id: int | None
    shared: bool
    read_from: FilePosition  # where the next read starts (the stored position once its read is stored)
    mtime: float | None = None
    closing: bool = False  # final read pending, then stop tracking
    # When its open was last refused: (lstat identity of the path, the rule, monotonic time); see reading.read_files
    refused: tuple[tuple[int, ...], AccessRule, float] | None = None


class Discovery:
    """Keeps the collector's tracked files in line with live attempts and the log directories."""

    def __init__(self, ctx: AppContext, tailer: LogTailer) -> None:
        self.ctx = ctx
        self.settings = ctx.settings
        self.tailer = tailer  # its open files are closed once no tracked source reads them
        self.tracked: dict[int, Tracked] = {}
        self.jobs: dict[int, JobInfo] = {}
        self.by_path: dict[str, set[int]] = {}  # path -> tracked source ids (one path may serve several jobs)
        self._by_job: dict[int, set[int]] = {}  # job id -> tracked source ids
        self.rescan = True  # a log directory may hold files not seen yet
        self._refresh_at: dt.datetime | None = None
        self._full_refresh_at: dt.datetime | None = None
        self._feed_cursor: int | None = None  # the change-feed id the in-memory jobs are current with
        self._grace_ends: dict[int, dt.datetime] = {}  # job id -> when an ended attempt of it leaves its grace period
        # Log directory -> (mtime_ns, job ids matched against, matching files): names are parsed again only after a
        # change.
        self._listings: dict[str, tuple[int, frozenset[int], list[tuple[str, str, tuple[int, int | None]]]]] = {}
        self._tracked_dirs: frozenset[str] | None = None  # directories of tracked files (None: recompute)

    @property
    def grace(self) -> dt.timedelta:
        return dt.timedelta(seconds=self.settings.collector_ended_grace)

    def full_refresh_due(self, now: dt.datetime) -> bool:
        return self._feed_cursor is None or self._full_refresh_at is None or now >= self._full_refresh_at

    def changes_due(self, now: dt.datetime) -> bool:
        """The change feed, a log directory or the clock (a grace period, the periodic check) asks for a look."""
        return self.rescan or self._refresh_at is None or now >= self._refresh_at or bool(self._grace_due(now))

    def tracked_dirs(self) -> frozenset[str]:
        """Directories holding tracked files, and the log directories (recomputed after the tracked set changed)."""
        if self._tracked_dirs is None:
            self._tracked_dirs = frozenset(
                {os.path.dirname(path) or "." for path in self.by_path} | set(self.settings.log_dirs)
            )
        return self._tracked_dirs

    def access_of(self, tracked: Tracked) -> AccessRule:
        """Whose rights a tracked file is opened with: its job's uid (unknown: refused, see RECOVERY_LOG_ACCESS)."""
        job = self.jobs.get(tracked.job_id or -1)
        return AccessRule.for_job(
            uid=job.user_id if job else None,
            gid=job.group_id if job else None,
            user_name=job.user_name if job else None,
            mode=self.settings.log_access,
            unknown_uid=self.settings.log_access_unknown_uid,
            roots=self.settings.log_dirs,
        )

    # ---- refreshing -------------------------------------------------------------------------

    async def refresh(self, now: dt.datetime) -> None:
        """Bring the tracked set in line with every live attempt and the log directories (at start; a safety net)."""
        grace = self.grace
        async with self.ctx.sessions() as session, session.begin():
            cursor = await feed_queries.latest_id(
                session
            )  # read first: a change committed meanwhile is read again, never missed
            self.jobs = await self._live_jobs(session, now - grace)
            self._grace_ends = {}
            for job in self.jobs.values():
                self._note_grace(job, now, grace)
            wanted = self._wanted_sources(now, grace, self.jobs.values())
            for key, attempt_id in (await asyncio.to_thread(self._scan_log_dirs)).items():
                wanted.setdefault(key, attempt_id)
            await self._sync_sources(session, wanted, now, None)
        self._caught_up(cursor, now)
        self._full_refresh_at = now + dt.timedelta(seconds=FULL_REFRESH_SECONDS)

    async def refresh_changes(self, now: dt.datetime) -> None:
        """Reload only the jobs new change-feed entries name (and those leaving their grace period); add new files."""
        grace = self.grace
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
            found: Wanted = {}
            if self.rescan or scope:
                found = await asyncio.to_thread(self._scan_log_dirs)
                scope |= {
                    job_id for (path, job_id) in found if not self._tracks(path, job_id)
                }  # a new file joins this round
            if scope:
                wanted = self._wanted_sources(now, grace, [self.jobs[j] for j in scope if j in self.jobs])
                for key, attempt_id in found.items():
                    if key[1] in scope:
                        wanted.setdefault(key, attempt_id)
                await self._sync_sources(session, wanted, now, scope)
        self._caught_up(cursor, now)

    def _caught_up(self, cursor: int, now: dt.datetime) -> None:
        self._feed_cursor, self.rescan = cursor, False
        self._refresh_at = now + dt.timedelta(seconds=REFRESH_SECONDS)

    async def _changed_jobs(self, session: Session, after: int) -> tuple[int, set[int]]:
        """(newest feed id read, ids of jobs with job or attempt changes after `after`): a query per 500 entries."""
        job_ids: set[int] = set()
        attempt_ids: set[int] = set()
        while True:
            entries = await feed_queries.read_since(session, after_id=after, topics=CHANGE_TOPICS, limit=IN_CHUNK)
            for entry in entries:
                after = entry.id
                if entry.entity_id is not None and entry.cluster in (None, self.settings.cluster):
                    (job_ids if entry.topic == "job" else attempt_ids).add(entry.entity_id)
            if len(entries) < IN_CHUNK:
                break
        job_ids.update(await job_queries.job_ids_of_attempts(session, attempt_ids=sorted(attempt_ids)))
        return after, job_ids

    def _note_grace(self, job: JobInfo, now: dt.datetime, grace: dt.timedelta) -> None:
        """Remember when an ended attempt's files stop being read: the clock decides that, not a change."""
        ends = [
            a.end + grace
            for a in job.attempts
            if a.state not in states.ACTIVE and a.end is not None and a.end + grace > now
        ]
        if ends:
            self._grace_ends[job.id] = min(ends)

    def _grace_due(self, now: dt.datetime) -> set[int]:
        return {job_id for job_id, at in self._grace_ends.items() if at <= now}

    def _tracks(self, path: str, job_id: int) -> bool:
        return any(self.tracked[i].job_id == job_id for i in self.by_path.get(path, ()))

    async def _live_jobs(
        self, session: Session, ended_after: dt.datetime, only: set[int] | None = None
    ) -> dict[int, JobInfo]:
        rows = await job_queries.live_attempts(
            session,
            cluster=self.settings.cluster,
            active_states=states.ACTIVE,
            ended_after=ended_after,
            job_ids=None if only is None else sorted(only),
        )
        job_ids = sorted({job.id for _, job in rows})
        live: dict[int, JobInfo] = {}
        if not job_ids:
            return live
        size = len(job_ids) if only is None else IN_CHUNK  # the full load keeps its one query per table
        policies = {
            p.job_id: EffectivePolicy.from_dict(p.effective)
            for p in await job_queries.policies_of_jobs(session, job_ids=job_ids, size=size)
        }
        # All attempts of these jobs (also ended ones): shared-path attribution needs every window.
        every = await job_queries.attempts_of_jobs(session, job_ids=job_ids, size=size)
        for _, job in rows:
            if job.id not in live:
                config = policies.get(job.id, EffectivePolicy()).anomaly_detection_config
                live[job.id] = JobInfo(
                    job.id,
                    job.slurm_job_id,
                    bool(job.shared_log_paths),
                    config.straggler_detection_enabled,
                    user_id=job.user_id,
                    group_id=job.group_id,
                    user_name=job.user,
                )
        for attempt in every:
            paths = tuple(dict.fromkeys(p for p in (attempt.stdout_path, attempt.stderr_path) if p))
            live[attempt.job_id].attempts.append(
                AttemptInfo(
                    attempt.id, attempt.attempt_index, attempt.state, attempt.start_time, attempt.end_time, paths
                )
            )
        return live

    @staticmethod
    def _attempt_live(attempt: AttemptInfo, now: dt.datetime, grace: dt.timedelta) -> bool:
        return attempt.state in states.ACTIVE or attempt.end is None or attempt.end > now - grace

    def _wanted_sources(self, now: dt.datetime, grace: dt.timedelta, of: Iterable[JobInfo]) -> Wanted:
        """(path, job id) -> owning attempt id (None: attributed per line) for every file of these jobs to read."""
        wanted: Wanted = {}
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

    # ---- log directories (in a worker thread) -----------------------------------------------

    def log_dirs_changed(self) -> bool:
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
                # Not only regular files: a symlink, FIFO or socket named after a job is tracked too, so that
                # reading it is refused and recorded (log.refused); is_dir never follows a symlink here.
                names = [
                    (entry.name, entry.path)
                    for entry in itertools.islice(entries, MAX_DIR_ENTRIES)
                    if not entry.is_dir(follow_symlinks=False)
                ]
        except OSError:
            return []
        matches = [(name, path, match) for name, path in names if (match := assoc.job_file_name(name, ids)) is not None]
        # A change within the filesystem's timestamp granularity of the listing could go unseen: cache only settled
        # listings.
        if time.time_ns() - before > 2_000_000_000:
            self._listings[directory] = (before, ids, matches)
        else:
            self._listings.pop(directory, None)
        return matches

    def _scan_log_dirs(self) -> Wanted:
        """Files in the configured log directories named after a tracked job (see job_file_name)."""
        by_slurm_id = {job.slurm_job_id: job for job in self.jobs.values()}
        ids = frozenset(by_slurm_id)
        found: Wanted = {}
        if not ids:
            return found
        for directory in self.settings.log_dirs:
            for _name, path, match in self._matching_files(directory, ids):
                job = by_slurm_id[match[0]]
                key = (path, job.id)
                if match[1] is None:
                    found[key] = None
                else:
                    attempt = next((a for a in job.attempts if a.index == match[1]), None)
                    if attempt is not None:  # not registered yet: picked up (from byte 0) once it is
                        found[key] = attempt.id
        return found

    # ---- the tracked set --------------------------------------------------------------------

    async def _sync_sources(self, session: Session, wanted: Wanted, now: dt.datetime, scope: set[int] | None) -> None:
        """Create, reopen, close and (un)track log sources; `scope`: only these jobs' sources (None: all)."""
        job_ids = sorted({job_id for _, job_id in wanted} if scope is None else scope)
        rows: list[LogSource] = await evidence_queries.log_sources_of_jobs(
            session, job_ids=job_ids, open_ones=scope is None
        )
        existing = {(row.path, row.job_id): row for row in rows}
        for (path, job_id), attempt_id in wanted.items():
            row = existing.get((path, job_id))
            if row is None:
                row = await evidence.add_log_source(session, path=path, job_id=job_id, attempt_id=attempt_id)
                existing[(path, job_id)] = row
            elif row.closed_at is not None and row.attempt_id is None:
                await evidence.reopen_log_source(session, source=row)  # a shared file of a job that runs again
        await session.flush()
        live_ids: set[int] = set()
        for key, row in existing.items():
            if row.closed_at is not None:
                continue
            live = key in wanted and (
                row.attempt_id is None or row.attempt_id == wanted[key] or self._owner_live(row, now)
            )
            live_ids.add(row.id)
            tracked = self.tracked.get(row.id)
            if tracked is None:
                tracked = self._track(
                    Tracked(row.id, row.path, row.job_id, row.attempt_id, row.attempt_id is None, _position_of(row))
                )
            tracked.closing = not live
        in_scope = self.tracked if scope is None else {i for job_id in scope for i in self._by_job.get(job_id, ())}
        for source_id in [s for s in in_scope if s not in live_ids]:
            self.forget(source_id)

    def _owner_live(self, row: LogSource, now: dt.datetime) -> bool:
        job = self.jobs.get(row.job_id or -1)
        attempt = next((a for a in job.attempts if a.id == row.attempt_id), None) if job else None
        return attempt is not None and self._attempt_live(attempt, now, self.grace)

    def _track(self, tracked: Tracked) -> Tracked:
        self.tracked[tracked.source_id] = tracked
        self.by_path.setdefault(tracked.path, set()).add(tracked.source_id)
        self._by_job.setdefault(tracked.job_id or -1, set()).add(tracked.source_id)
        self._tracked_dirs = None
        return tracked

    def forget(self, source_id: int) -> None:
        """Stop tracking a source; close the file once no other tracked source reads it."""
        tracked = self.tracked.pop(source_id, None)
        if tracked is None:
            return
        self._tracked_dirs = None
        _discard(self.by_path, tracked.path, source_id)
        _discard(self._by_job, tracked.job_id or -1, source_id)
        if tracked.path not in self.by_path:
            self.tailer.close(tracked.path)


def _position_of(row: LogSource) -> FilePosition:
    return FilePosition(
        path=row.path,
        offset=row.offset or 0,
        inode=row.inode,
        device=row.device,
        head_digest=row.head_digest or "",
        head_length=row.head_length or 0,
        line_number=row.line_number or 0,
        skipping=bool(row.skipping),
    )


def _discard(index: dict[Any, set[int]], key: Any, source_id: int) -> None:
    """Remove a source from an index entry, and the entry once it is empty."""
    ids = index.get(key)
    if ids is not None:
        ids.discard(source_id)
        if not ids:
            del index[key]
