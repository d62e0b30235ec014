"""Storing what the collector read: file positions, and crash/checkpoint/progress/throughput evidence on its attempt.

A line of a file with one owning attempt is recorded on it (or dropped when it was written after that
attempt ended); a line of a shared file is attributed by its label or time, or waits (a PendingEvent)
until the attempt it names is registered, and is redelivered by `retry_pending`.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from app.domain.control import states
from app.domain.detection.signatures import CheckpointEvent, CrashSignature, ProgressMarker, ThroughputSample
from app.evidence import queries as evidence_queries
from app.evidence import service as evidence
from app.infra.context import AppContext
from app.infra.db import Session
from app.infra.errors import database_error_text, database_problem
from app.jobfiles.reader import LogEvent
from app.jobs import queries as job_queries
from worker.collector.discovery import JobInfo
from worker.collector.reading import FileRead

if TYPE_CHECKING:  # row types for annotations only: the SQL lives in the areas' queries
    from app.evidence.models import LogSource
    from app.jobs.models import Attempt

log = logging.getLogger("recovery.collector")

NEW_FILE_NOTES = ("truncated", "rotated", "deleted")


_PENDING_BATCH = 200  # waiting events redelivered per tick
_ASK_AGAIN = dt.timedelta(seconds=30)  # how long "nothing waits" is believed without asking the database again
_NEVER = dt.datetime.max.replace(tzinfo=dt.UTC)  # nothing waits: only a new deferral or a poke asks again


class Recorder:
    """Applies a tick's file reads to the database and redelivers events waiting for their attempt."""

    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx
        self.settings = ctx.settings
        # when the earliest waiting event is due (None: not known, ask the database): ticks before it
        # skip the query, so an idle tick costs only its stats
        self._next_due: dt.datetime | None = None
        self._asked_at = dt.datetime.min.replace(tzinfo=dt.UTC)

    async def apply(
        self, reads: list[FileRead], jobs_by_id: Mapping[int, JobInfo], now: dt.datetime
    ) -> tuple[int, list[FileRead]]:
        """(anomalies recorded, reads stored): one transaction per tick; one per file only when that fails."""
        applied = reads
        try:
            async with self.ctx.sessions() as session, session.begin():
                loaded = await _load_for(session, reads)  # held: the identity map keeps rows only weakly
                anomalies = 0
                for read in reads:
                    anomalies += await self._apply_one(session, read, jobs_by_id, now)
                del loaded
        except Exception as exc:
            if database_problem(exc) is not None:
                # The database is away: one by one would fail the same way. Nothing is stored; read again later.
                log.warning("collector: %s; %d file read(s) are read again later", database_error_text(exc), len(reads))
                for read in reads:
                    read.tracked.mtime = None
                return 0, []
            log.exception("applying %d file reads together failed; applying them one by one", len(reads))
            anomalies, applied = 0, []
            for read in reads:
                try:
                    async with self.ctx.sessions() as session, session.begin():
                        anomalies += await self._apply_one(session, read, jobs_by_id, now)
                    applied.append(read)
                except Exception:
                    log.exception("applying the read of %s failed; it is read again next time", read.tracked.path)
                    read.tracked.mtime = None
        return anomalies, applied

    async def _apply_one(
        self, session: Session, read: FileRead, jobs_by_id: Mapping[int, JobInfo], now: dt.datetime
    ) -> int:
        tracked = read.tracked
        row = await evidence_queries.get_log_source(session, source_id=tracked.source_id)
        if row is None:
            return 0
        job = jobs_by_id.get(row.job_id or -1)
        owner = (
            await job_queries.get_attempt(session, attempt_id=row.attempt_id) if row.attempt_id is not None else None
        )
        await self._note_refusal(session, row, job, owner, read)
        # Lines after a truncation of an ended attempt's own file were written by someone else.
        foreign = owner is not None and owner.state not in states.ACTIVE and "truncated" in read.notes
        lines = [
            _line_event(event, read.context.get(event.event_id, ()))
            for event in read.events
            if isinstance(event.signal, (CrashSignature, CheckpointEvent))
        ]
        recorded = await evidence.record_lines(
            session,
            source=row,
            owner=owner,
            windows=job.windows() if job else None,
            events=lines,
            now=now,
            foreign=foreign,
        )
        if recorded.next_try_at is not None and self._next_due is not None:
            self._next_due = min(self._next_due, recorded.next_try_at)
        anomalies = recorded.anomalies
        markers = []
        for result in read.results:
            marker = result.latest_progress
            if marker is not None and isinstance(marker.signal, ProgressMarker):
                markers.append(_marker_seen(row, job, marker))
            sample = result.latest_throughput
            if (
                sample is not None
                and isinstance(sample.signal, ThroughputSample)
                and job is not None
                and job.straggler
                and self.settings.straggler_enabled
            ):
                attempt = owner or await _attempt_for_line(session, job, sample)
                if attempt is not None and await self._observe_throughput(session, row, attempt, sample):
                    anomalies += 1
        latest = max((r.last_output_at for r in read.results if r.bytes_read and r.last_output_at), default=None)
        close = tracked.closing or (foreign and owner is not None)
        await evidence.store_read(
            session,
            source=row,
            read=evidence.SourceRead(
                position=read.position,
                bytes_read=bool(read.bytes_read),
                last_output_at=latest if read.bytes_read else None,
                replaced=any(note in NEW_FILE_NOTES for note in read.notes),
                markers=tuple(markers),
                close=close,
            ),
            now=now,
        )
        if close:
            tracked.closing = True
        return anomalies

    async def _note_refusal(
        self, session: Session, row: LogSource, job: JobInfo | None, owner: Attempt | None, read: FileRead
    ) -> None:
        """Keep whether the path was refused; record `log.refused` on its attempt (the newest one of a shared file)."""
        refused = read.refused
        if refused is None:
            if row.refused_reason is not None:
                await evidence.note_refusal(session, source=row, job=None, attempt_index=None, reason=None)
            return
        if owner is not None:
            index: int | None = owner.attempt_index
        else:
            index = max((a.index for a in job.attempts), default=None) if job else None
        job_row = await job_queries.get_job(session, job_id=row.job_id) if row.job_id is not None else None
        await evidence.note_refusal(
            session, source=row, job=job_row, attempt_index=index, reason=refused.reason, detail=refused.detail
        )

    async def _observe_throughput(self, session: Session, row: LogSource, attempt: Attempt, sample: LogEvent) -> bool:
        assert isinstance(sample.signal, ThroughputSample)
        return (
            await evidence.observe_throughput(
                session,
                source=row,
                attempt=attempt,
                values=sample.signal.values,
                at=sample.source_time or sample.read_at,
                line_number=sample.line_number,
                line=sample.text,
                source_time=sample.source_time,
                drop_ratio=self.settings.straggler_drop_ratio,
                duration=self.settings.straggler_duration,
            )
            is not None
        )

    # ---- waiting events ---------------------------------------------------------------------

    async def retry_pending(self, now: dt.datetime, *, free: bool) -> int:
        """Redeliver undecided events: due ones count a try; `free` (the observer's poke) retries all without one."""
        if self._next_due is _NEVER and now - self._asked_at >= _ASK_AGAIN:
            self._next_due = None  # pushed lines (the API process) may have deferred events this worker never saw
        if not free and self._next_due is not None and now < self._next_due:
            return 0
        self._asked_at = now
        async with self.ctx.sessions() as session, session.begin():
            anomalies, looked_at = await evidence.redeliver_pending(session, now=now, free=free, limit=_PENDING_BATCH)
            # a full batch may leave more due; else the earliest next try (the moved ones included)
            self._next_due = None if looked_at >= _PENDING_BATCH else await evidence_queries.next_pending_at(session)
            if self._next_due is None and looked_at < _PENDING_BATCH:
                self._next_due = _NEVER
        return anomalies


async def _load_for(session: Session, reads: list[FileRead]) -> list[Any]:
    """The reads' log sources and owning attempts in two queries per 500 files (later gets hit the identity map)."""
    loaded: list[Any] = await evidence_queries.log_sources_by_ids(
        session, ids=[read.tracked.source_id for read in reads]
    )
    owners = [row.attempt_id for row in loaded if row.attempt_id is not None]
    loaded += await job_queries.attempts_by_id_list(session, ids=owners)
    return loaded


def _marker_seen(row: LogSource, job: JobInfo | None, marker: LogEvent) -> evidence.MarkerSeen:
    """A progress marker with the attempt it belongs to (the file's own, else the job's attempt for its line)."""
    if row.attempt_id is not None or job is None:
        return evidence.MarkerSeen(marker, row.attempt_id, attempt_known=row.attempt_id is not None)
    attempt = job.attempt_for_line(marker)
    return evidence.MarkerSeen(marker, attempt.id if attempt else None)


async def _attempt_for_line(session: Session, job: JobInfo, event: LogEvent) -> Attempt | None:
    info = job.attempt_for_line(event)
    return await job_queries.get_attempt(session, attempt_id=info.id) if info else None


def _line_event(event: LogEvent, context: tuple[str, ...] = ()) -> evidence.LineEvent:
    assert isinstance(event.signal, (CrashSignature, CheckpointEvent))  # callers pass only these
    return evidence.LineEvent(
        event_key=event.event_id,
        log_path=event.path,
        line_number=event.line_number,
        line=event.text,
        source_time=event.source_time,
        read_at=event.read_at,
        signal=event.signal,
        attempt_label=event.attempt,
        context=context,
    )
