"""Recording pushed log lines: identity first (a replay is counted, not recorded again), then the file path's record.

Each stream is a log source (`push://<cluster>/<job>/<node><file>`) whose lines are read by the same
LogTailer from memory and recorded by the evidence service exactly as a shared file's lines are: attributed
to an attempt by the `slurm_job_attempt` label or by the line's source time, or kept waiting in the bounded
redelivery when neither decides yet. The caller commits; only then is the push acknowledged.
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime as dt
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from app.domain.admission.mode import ENROLLED
from app.domain.detection import association as assoc
from app.domain.detection.signatures import CheckpointEvent, CrashSignature, ProgressMarker
from app.evidence import service as evidence
from app.infra.config import Settings
from app.infra.db import dialect_of
from app.ingest import queries
from app.ingest.mapping import StreamTarget, line_key, line_time, stream_key, target_of
from app.ingest.models import PushedLine, PushStream
from app.ingest.wire import NONE, OBSERVED, Entry, Stream
from app.jobfiles.reader import FilePosition, LogEvent, LogTailer
from app.jobs import queries as job_queries

PUSH_SCHEME = "push://"
TEXT_KEPT = 4096  # characters of each pushed line kept for the log view

# why a stream's lines were not recorded (counted on the stream and in the push's answer)
NO_JOB_LABEL = "no-job-label"
PUSH_OFF = "push-off"
UNENROLLED = "unenrolled"


@dataclass
class PushOutcome:
    """What became of one push: counts the collector is told and the metrics add up."""

    streams: int = 0
    lines: int = 0
    recorded: int = 0
    replayed: int = 0
    anomalies: int = 0
    dropped: Counter[str] = field(default_factory=Counter)


def source_path(target: StreamTarget) -> str:
    """The log source path of a pushed stream (what the log view and anomalies name)."""
    where = (target.filename or "").lstrip("/")
    return f"{PUSH_SCHEME}{target.cluster}/{target.slurm_job_id}/{target.node or '-'}/{where}"


async def record_push(
    session: AsyncSession,
    *,
    collector: str,
    streams: Sequence[Stream],
    settings: Settings,
    push_clusters: Mapping[str, bool],
    tailer: LogTailer,
    now: dt.datetime,
) -> PushOutcome:
    """Record a decoded push: new lines once each, on their job's attempt (or waiting); unenrolled jobs dropped."""
    outcome = PushOutcome(streams=len(streams))
    for stream in streams:
        outcome.lines += len(stream.entries)
        if stream.entries:
            await _record_stream(session, collector, stream, settings, push_clusters, tailer, now, outcome)
    return outcome


async def _record_stream(
    session: AsyncSession,
    collector: str,
    stream: Stream,
    settings: Settings,
    push_clusters: Mapping[str, bool],
    tailer: LogTailer,
    now: dt.datetime,
    outcome: PushOutcome,
) -> None:
    target = target_of(stream.labels, settings)
    count = len(stream.entries)
    if target.slurm_job_id is None:
        outcome.dropped[NO_JOB_LABEL] += count
        return
    if not push_clusters.get(target.cluster, False):
        outcome.dropped[PUSH_OFF] += count
        return
    job = await job_queries.find_job(session, slurm_job_id=target.slurm_job_id, cluster=target.cluster)
    row = await _stream_row(session, collector, stream.labels, target, now)
    if job is not None and job.enrolment != ENROLLED:
        row.dropped += count
        row.drop_reason = UNENROLLED
        row.last_push_at = now
        outcome.dropped[UNENROLLED] += count
        return
    source = await _log_source(session, row, target, job.id if job else None)
    keys = [line_key(row.stream_key, entry) for entry in stream.entries]
    fresh = await _claim_lines(session, row.id, keys, stream.entries, source.line_number or 0, now)
    replayed = count - len(fresh)
    row.replayed += replayed
    outcome.replayed += replayed
    row.last_push_at = now
    if not fresh:
        return
    entries = [stream.entries[i] for i in fresh]
    row.lines += len(entries)
    row.observed_time += sum(1 for e in entries if e.time_kind == OBSERVED)
    row.no_timestamp += sum(1 for e in entries if e.time_kind == NONE)
    newest = max((e.time_ns for e in entries), default=0)
    if newest:
        newest_at = dt.datetime.fromtimestamp(newest / 1e9, dt.UTC)
        if row.latest_line_time is None or newest_at > row.latest_line_time:
            row.latest_line_time = newest_at
    outcome.recorded += len(entries)
    outcome.anomalies += await _record_lines(
        session, row, source, target, job is not None, [keys[i] for i in fresh], entries, settings, tailer, now
    )


async def _claim_lines(
    session: AsyncSession, stream_id: int, keys: list[str], entries: Sequence[Entry], read: int, now: dt.datetime
) -> list[int]:
    """Record the identities (and kept text, numbered after the `read` lines) of lines not seen before; their indexes.

    A key already recorded (a replay, or the same line twice in this push) is left out, so the detectors never
    see it again. One lookup per 500 keys and one driver executemany for the rest: not the ORM's per-row bulk
    path, which cost more than the lines' detection (bench/ingest_push.py). On SQLite this beats a multi-row
    INSERT … RETURNING, which is prepared anew for every batch.
    """
    known = await queries.known_line_keys(session, keys=keys)
    fresh: list[int] = []
    for index, key in enumerate(keys):
        if key not in known:
            known.add(key)
            fresh.append(index)
    if fresh:
        number = read + 1  # the reader numbers the new lines after those of the stream read before
        rows = []
        for index in fresh:
            entry = entries[index]
            line = entry.line[:TEXT_KEPT]
            rows.append((keys[index], stream_id, entry.time_ns, entry.time_kind, line, number))
            number += entry.line.count("\n") + 1  # an entry holding a traceback is several lines
        await _insert_lines(session, rows, now)
    return fresh


_LINE_COLUMNS = ("line_key", "stream_id", "time_ns", "time_kind", "line", "line_number", "received_at")


async def _insert_lines(session: AsyncSession, rows: list[tuple[Any, ...]], now: dt.datetime) -> None:
    """One driver executemany of identity rows (ON CONFLICT DO NOTHING), `now` as received_at.

    Plain tuples to the driver: SQLAlchemy's per-row parameter processing of a Core executemany took as long
    as the insert itself (bench/ingest_push.py); received_at, the only typed value, is converted once.
    """
    connection = await session.connection()
    dialect = connection.dialect
    convert = PushedLine.__table__.c.received_at.type.bind_processor(dialect)
    received = convert(now) if convert else now
    if dialect.paramstyle == "qmark":
        marks = ", ".join("?" for _ in _LINE_COLUMNS)
    elif dialect.paramstyle == "numeric_dollar":
        marks = ", ".join(f"${i}" for i in range(1, len(_LINE_COLUMNS) + 1))
    else:  # another driver: SQLAlchemy's own executemany
        table = PushedLine.__table__
        values = [dict(zip(_LINE_COLUMNS, (*row, now), strict=True)) for row in rows]
        await session.execute(_dialect(session).insert(table).on_conflict_do_nothing(), values)
        return
    sql = (
        f"INSERT INTO {PushedLine.__tablename__} ({', '.join(_LINE_COLUMNS)}) VALUES ({marks}) "
        "ON CONFLICT (line_key) DO NOTHING"
    )
    await connection.exec_driver_sql(sql, [(*row, received) for row in rows])


async def _stream_row(
    session: AsyncSession, collector: str, labels: dict[str, str], target: StreamTarget, now: dt.datetime
) -> PushStream:
    key = stream_key(collector, labels)
    row = await queries.stream_by_key(session, key=key)
    if row is None:
        # insert-or-ignore: two pushes of a new stream at once (a client's concurrent batches) both get its row
        values = {
            "stream_key": key,
            "collector": collector[:128],
            "cluster": target.cluster[:128],
            "slurm_job_id": target.slurm_job_id,
            "attempt_label": target.attempt,
            "node": (target.node or "")[:256] or None,
            "filename": target.filename,
            "created_at": now,
            "lines": 0,
            "replayed": 0,
            "observed_time": 0,
            "no_timestamp": 0,
            "rewritten_time": 0,
            "dropped": 0,
        }
        await session.execute(_dialect(session).insert(PushStream).values(**values).on_conflict_do_nothing())
        row = await queries.stream_by_key(session, key=key)
        assert row is not None
    return row


def _dialect(session: AsyncSession) -> Any:
    return postgresql if dialect_of(session) == "postgresql" else sqlite


async def _log_source(session: AsyncSession, row: PushStream, target: StreamTarget, job_id: int | None) -> Any:
    """The stream's log source (created on its first lines; given its job once Recovery knows the job)."""
    source = await queries.log_source_of(session, stream=row)
    if source is None:
        source = await evidence.add_shared_log_source(session, path=source_path(target), job_id=job_id)
        row.log_source_id = source.id
    elif source.job_id is None and job_id is not None:
        await evidence.give_log_source_job(session, source=source, job_id=job_id)
    return source


async def _record_lines(
    session: AsyncSession,
    row: PushStream,
    source: Any,
    target: StreamTarget,
    job_known: bool,
    keys: list[str],
    entries: list[Any],
    settings: Settings,
    tailer: LogTailer,
    now: dt.datetime,
) -> int:
    """Run the new lines through the file path's reader and record what it finds (crash, checkpoint, progress)."""
    pieces = [entry.line.encode("utf-8", "surrogatepass") for entry in entries]
    starts: list[int] = []
    offset = 0
    for piece in pieces:
        starts.append(offset)
        offset += len(piece) + 1
    data = b"\n".join(pieces) + b"\n"
    base = source.offset or 0
    results = await _read(tailer, source.path, data, source.line_number or 0)

    def entry_at(event: LogEvent) -> int:
        return bisect.bisect_right(starts, event.offset) - 1

    def timed(event: LogEvent) -> LogEvent:
        index = entry_at(event)
        when = line_time(entries[index], received=now, settings=settings)
        if when.kind == "rewritten":
            row.rewritten_time += 1
        return dataclasses.replace(event, offset=base + event.offset, source_time=when.at)

    lines: list[evidence.LineEvent] = []
    for result in results:
        for found in result.events:
            if not isinstance(found.signal, (CrashSignature, CheckpointEvent)):
                continue
            index = entry_at(found)
            event = timed(found)
            signal = found.signal
            lines.append(
                evidence.LineEvent(
                    event_key=f"{keys[index]}:{event.offset - base - starts[index]}",
                    log_path=source.path,
                    line_number=event.line_number,
                    line=event.text,
                    source_time=event.source_time,
                    read_at=now,
                    signal=signal,
                    attempt_label=target.attempt if target.attempt is not None else event.attempt,
                )
            )
    recorded = await evidence.record_lines(session, source=source, owner=None, windows=None, events=lines, now=now)
    markers: list[evidence.MarkerSeen] = []
    windows = await _windows(session, source.job_id)
    for result in results:
        marker = result.latest_progress
        if marker is None or not isinstance(marker.signal, ProgressMarker):
            continue
        marker = timed(marker)
        attempt_id = None
        if job_known:
            decision = assoc.attribute_shared_event(
                label=target.attempt if target.attempt is not None else marker.attempt,
                source_time=marker.source_time,
                windows=[w for w, _ in windows],
                now=now,
            )
            attempt_id = next((i for w, i in windows if w.index == decision.attempt_index), None)
        markers.append(evidence.MarkerSeen(marker, attempt_id, attempt_known=job_known and attempt_id is not None))
    last = results[-1].position if results else FilePosition(path=source.path)
    newest = max((e.time_ns for e in entries), default=0)
    output_at = dt.datetime.fromtimestamp(newest / 1e9, dt.UTC) if newest else now
    await evidence.store_read(
        session,
        source=source,
        read=evidence.SourceRead(
            position=FilePosition(path=source.path, offset=base + len(data), line_number=last.line_number),
            bytes_read=True,
            last_output_at=min(output_at, now),
            replaced=False,
            markers=tuple(markers),
        ),
        now=now,
    )
    return recorded.anomalies


async def _read(tailer: LogTailer, path: str, data: bytes, line_number: int) -> list[Any]:
    # In the event loop, not a thread: the tailer's per-path step state is not shared between threads, and a
    # push's lines (capped by the body size) take milliseconds to scan.
    return tailer.read_buffer(path, data, line_number=line_number)


async def _windows(session: AsyncSession, job_id: int | None) -> list[tuple[assoc.AttemptWindow, int]]:
    if job_id is None:
        return []
    rows = await job_queries.attempts_of(session, job_id=job_id)
    return [(assoc.AttemptWindow(a.attempt_index, a.start_time, a.end_time), a.id) for a in rows]


async def forget_old_lines(session: AsyncSession, *, before: dt.datetime, limit: int = 10_000) -> int:
    """Delete pushed-line identities received before `before` (the retention): a replay older than that is new again."""
    ids = list(
        (
            await session.execute(
                select(PushedLine.id).where(PushedLine.received_at < before).order_by(PushedLine.id).limit(limit)
            )
        ).scalars()
    )
    if ids:
        await session.execute(delete(PushedLine).where(PushedLine.id.in_(ids)))
    return len(ids)
