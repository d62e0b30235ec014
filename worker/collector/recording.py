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
from app.domain.detection import association as assoc
from app.domain.detection.hang import ProgressState
from app.domain.detection.signatures import CheckpointEvent, CrashSignature, ProgressMarker, ThroughputSample
from app.evidence import queries as evidence_queries
from app.evidence import service as evidence
from app.infra.context import AppContext
from app.infra.db import Session
from app.infra.errors import database_error_text, database_problem
from app.jobfiles.reader import FilePosition, LogEvent
from app.jobs import queries as job_queries
from app.jobs import service as job_service
from worker.collector.discovery import JobInfo
from worker.collector.reading import FileRead

if TYPE_CHECKING:  # row types for annotations only: the SQL lives in the areas' queries
    from app.evidence.models import LogSource
    from app.jobs.models import Attempt

log = logging.getLogger("recovery.collector")

LAST_READ_TOUCH = dt.timedelta(seconds=60)  # how stale last_read_at may get while a file is idle
NEW_FILE_NOTES = ("truncated", "rotated", "deleted")


_PENDING_BATCH = 200  # waiting events redelivered per tick
_NEVER = dt.datetime.max.replace(tzinfo=dt.UTC)  # nothing waits: only a new deferral or a poke asks again


class Recorder:
    """Applies a tick's file reads to the database and redelivers events waiting for their attempt."""

    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx
        self.settings = ctx.settings
        # when the earliest waiting event is due (None: not known, ask the database): ticks before it
        # skip the query, so an idle tick costs only its stats
        self._next_due: dt.datetime | None = None

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
        position = read.position
        changed = _store_position(row, position)
        job = jobs_by_id.get(row.job_id or -1)
        owner = (
            await job_queries.get_attempt(session, attempt_id=row.attempt_id) if row.attempt_id is not None else None
        )
        await self._note_refusal(session, row, job, owner, read)
        replaced = any(note in NEW_FILE_NOTES for note in read.notes)
        anomalies = 0
        # Lines after a truncation of an ended attempt's own file were written by someone else.
        foreign = owner is not None and owner.state not in states.ACTIVE and "truncated" in read.notes
        for event in read.events:
            if not isinstance(event.signal, (CrashSignature, CheckpointEvent)):
                continue
            line_event = _line_event(event, read.context.get(event.event_id, ()))
            anomalies += await self._attribute(session, row, job, owner, line_event, now, foreign=foreign)
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
                armed_for = row.progress_attempt_id if row.progress_phase is not None else None
                if _observe_progress(row, job, marker):
                    changed = True
                    if row.progress_attempt_id not in (None, armed_for):  # goodput: an attempt's first progress
                        await job_service.note_first_progress(
                            session, attempt_id=row.progress_attempt_id, at=row.progress_at
                        )
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
        if changed or read.bytes_read or row.last_read_at is None or now - row.last_read_at > LAST_READ_TOUCH:
            row.last_read_at = now
        if tracked.closing or (foreign and owner is not None):
            row.closed_at = now
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

    async def _attribute(
        self,
        session: Session,
        row: LogSource,
        job: JobInfo | None,
        owner: Attempt | None,
        event: evidence.LineEvent,
        now: dt.datetime,
        *,
        foreign: bool = False,
    ) -> int:
        """Record an event on its attempt, keep it waiting, or drop it (with an audit event)."""
        if owner is not None:
            ended = owner.state not in states.ACTIVE
            if foreign or (ended and assoc.written_after_end(source_time=event.source_time, end=owner.end_time)):
                job_row = await job_queries.get_job(session, job_id=owner.job_id)
                await evidence.drop_event(
                    session,
                    job=job_row,
                    log_path=row.path,
                    event=event,
                    reason=assoc.AFTER_ATTEMPT_END,
                    tries=0,
                    attempt_index=owner.attempt_index,
                )
                return 0
            return await _record(session, owner, event)
        windows = job.windows() if job else await _windows_of(session, row.job_id)
        decision = assoc.attribute_shared_event(
            label=event.attempt_label, source_time=event.source_time, windows=windows, now=now
        )
        if decision.decided:
            attempt = await _attempt_at(session, row.job_id, decision.attempt_index)
            if attempt is not None:
                return await _record(session, attempt, event)
        delay = assoc.next_retry_delay(0) or 0.0
        next_try_at = now + dt.timedelta(seconds=delay)
        await evidence.defer_event(
            session, source=row, event=event, reason=decision.reason or assoc.NO_ATTEMPTS, next_try_at=next_try_at
        )
        if self._next_due is not None:
            self._next_due = min(self._next_due, next_try_at)
        return 0

    # ---- waiting events ---------------------------------------------------------------------

    async def retry_pending(self, now: dt.datetime, *, free: bool) -> int:
        """Redeliver undecided events: due ones count a try; `free` (the observer's poke) retries all without one."""
        anomalies = 0
        if not free and self._next_due is not None and now < self._next_due:
            return 0
        async with self.ctx.sessions() as session, session.begin():
            due = await evidence_queries.due_pending(session, now=None if free else now, limit=_PENDING_BATCH)
            for pending, source in due:
                scheduled = pending.next_try_at <= now
                event = evidence.pending_to_event(pending, source.path)
                windows = await _windows_of(session, source.job_id)
                decision = assoc.attribute_shared_event(
                    label=event.attempt_label, source_time=event.source_time, windows=windows, now=now
                )
                if decision.decided:
                    attempt = await _attempt_at(session, source.job_id, decision.attempt_index)
                    if attempt is not None:
                        anomalies += await _record(session, attempt, event)
                        await evidence.delete_pending(session, pending=pending)
                        continue
                if not scheduled:
                    continue
                pending.tries += 1
                pending.reason = decision.reason
                delay = assoc.next_retry_delay(pending.tries)
                if delay is None:
                    job = (
                        await job_queries.get_job(session, job_id=source.job_id) if source.job_id is not None else None
                    )
                    await evidence.drop_event(
                        session, job=job, log_path=source.path, event=event, reason=decision.reason, tries=pending.tries
                    )
                    await evidence.delete_pending(session, pending=pending)
                else:
                    pending.next_try_at = now + dt.timedelta(seconds=delay)
            # a full batch may leave more due; else the earliest next try (the moved ones included)
            self._next_due = None if len(due) >= _PENDING_BATCH else await evidence_queries.next_pending_at(session)
            if self._next_due is None and len(due) < _PENDING_BATCH:
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


async def _record(session: Session, attempt: Attempt, event: evidence.LineEvent) -> int:
    """Record a line event on its attempt: 1 when that is a new crash anomaly."""
    recorded = await evidence.record_line_event(session, attempt=attempt, event=event)
    return int(recorded is not None and isinstance(event.signal, CrashSignature))


async def _attempt_at(session: Session, job_id: int | None, attempt_index: int | None) -> Attempt | None:
    return await job_queries.attempt_at(session, job_id=job_id, attempt_index=attempt_index)


async def _attempt_for_line(session: Session, job: JobInfo, event: LogEvent) -> Attempt | None:
    info = job.attempt_for_line(event)
    return await job_queries.get_attempt(session, attempt_id=info.id) if info else None


def _observe_progress(row: LogSource, job: JobInfo | None, marker: LogEvent) -> bool:
    """Arm the hang detector for the file (and the attempt the marker belongs to)."""
    state = ProgressState(
        armed=row.progress_phase is not None,
        phase=row.progress_phase,
        marker_offset=row.progress_offset,
        marker_at=row.progress_at,
    )
    at = marker.source_time or marker.read_at
    assert isinstance(marker.signal, ProgressMarker)  # callers pass a progress marker
    new = state.observe(marker.signal, line_number=marker.line_number, offset=marker.offset, at=at)
    if new is state:
        return False
    row.progress_phase, row.progress_offset, row.progress_line_number = new.phase, new.marker_offset, new.marker_line
    row.progress_at, row.progress_line = new.marker_at, marker.text[:2000]
    if row.attempt_id is not None:
        row.progress_attempt_id = row.attempt_id
    elif job is not None:
        attempt = job.attempt_for_line(marker)
        row.progress_attempt_id = attempt.id if attempt else None
    return True


async def _windows_of(session: Session, job_id: int | None) -> list[assoc.AttemptWindow]:
    if job_id is None:
        return []
    rows = await job_queries.attempts_of(session, job_id=job_id)
    return [assoc.AttemptWindow(a.attempt_index, a.start_time, a.end_time) for a in rows]


def _store_position(row: LogSource, position: FilePosition) -> bool:
    values = {
        "offset": position.offset,
        "inode": position.inode,
        "device": position.device,
        "head_digest": position.head_digest or None,
        "head_length": position.head_length,
        "line_number": position.line_number,
        "skipping": position.skipping,
    }
    changed = False
    for name, value in values.items():
        if getattr(row, name) != value:
            setattr(row, name, value)
            changed = True
    return changed


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
