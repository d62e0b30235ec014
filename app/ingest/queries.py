"""Reads of pushed logs: which line identities are known, a stream's rows, pipeline liveness and the lines kept."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.evidence.models import LogSource
from app.ingest.models import PushedLine, PushStream

_CHUNK = 500


async def known_line_keys(session: AsyncSession, *, keys: Sequence[str]) -> set[str]:
    """Those of `keys` already recorded (a replayed line)."""
    found: set[str] = set()
    for start in range(0, len(keys), _CHUNK):
        chunk = list(set(keys[start : start + _CHUNK]))
        found.update(
            (await session.execute(select(PushedLine.line_key).where(PushedLine.line_key.in_(chunk)))).scalars()
        )
    return found


async def stream_by_key(session: AsyncSession, *, key: str) -> PushStream | None:
    """The pushed stream with this identity, if it was pushed before."""
    return (await session.execute(select(PushStream).where(PushStream.stream_key == key))).scalar_one_or_none()


async def log_source_of(session: AsyncSession, *, stream: PushStream) -> LogSource | None:
    """The log source a pushed stream's lines are recorded on."""
    if stream.log_source_id is None:
        return None
    return await session.get(LogSource, stream.log_source_id)


async def pushed_source(session: AsyncSession, *, job_id: int, path: str) -> LogSource | None:
    """The log source a job's pushed stream is recorded on, by its `push://` path (None: no such pushed stream)."""
    query = (
        select(LogSource)
        .join(PushStream, PushStream.log_source_id == LogSource.id)
        .where(LogSource.job_id == job_id, LogSource.path == path)
        .limit(1)
    )
    return (await session.execute(query)).scalar_one_or_none()


async def stream_of_source(session: AsyncSession, *, log_source_id: int) -> PushStream | None:
    """The pushed stream behind a log source (None: a file)."""
    query = select(PushStream).where(PushStream.log_source_id == log_source_id).limit(1)
    return (await session.execute(query)).scalar_one_or_none()


@dataclass(frozen=True)
class PipelineLiveness:
    """Whether the pipeline that carries a pushed stream is alive: other streams of its collector or node arrive."""

    alive: bool
    collector: str
    node: str | None
    other_streams: int  # other streams of the same collector or node with a push since the window start
    latest_other_push_at: dt.datetime | None


async def pipeline_liveness(session: AsyncSession, *, stream: PushStream, since: dt.datetime) -> PipelineLiveness:
    """Did other streams of the same collector or node arrive since `since` (silence is the job's, not the pipe's)?"""
    same_pipe = PushStream.collector == stream.collector
    if stream.node:
        same_pipe = same_pipe | (PushStream.node == stream.node)
    query = select(func.count(), func.max(PushStream.last_push_at)).where(
        same_pipe, PushStream.id != stream.id, PushStream.last_push_at >= since
    )
    count, latest = (await session.execute(query)).one()
    return PipelineLiveness(bool(count), stream.collector, stream.node, int(count or 0), latest)


async def pushed_lines_between(session: AsyncSession, *, log_source_id: int, first: int, last: int) -> list[PushedLine]:
    """The kept pushed entries of a log source that hold lines `first`..`last` (entry line numbers), in order.

    An entry may hold several lines: the entry starting at or before `first` comes first, then those after it.
    """
    stream = await stream_of_source(session, log_source_id=log_source_id)
    if stream is None:
        return []
    numbered = (PushedLine.stream_id == stream.id, PushedLine.line_number.is_not(None))
    before = (
        select(PushedLine)
        .where(*numbered, PushedLine.line_number <= first)
        .order_by(PushedLine.line_number.desc())
        .limit(1)
    )
    after = (
        select(PushedLine)
        .where(*numbered, PushedLine.line_number > first, PushedLine.line_number <= last)
        .order_by(PushedLine.line_number)
        .limit(last - first + 1)
    )
    return [*(await session.execute(before)).scalars(), *(await session.execute(after)).scalars()]


async def push_counts(session: AsyncSession) -> dict[str, int]:
    """Totals over every pushed stream (lines recorded, replayed, dropped, untimed) for status pages and tests."""
    query = select(
        func.coalesce(func.sum(PushStream.lines), 0),
        func.coalesce(func.sum(PushStream.replayed), 0),
        func.coalesce(func.sum(PushStream.dropped), 0),
        func.coalesce(func.sum(PushStream.no_timestamp), 0),
        func.coalesce(func.sum(PushStream.observed_time), 0),
        func.coalesce(func.sum(PushStream.rewritten_time), 0),
    )
    lines, replayed, dropped, untimed, observed, rewritten = (await session.execute(query)).one()
    return {
        "lines": int(lines),
        "replayed": int(replayed),
        "dropped": int(dropped),
        "noTimestamp": int(untimed),
        "observedTime": int(observed),
        "rewrittenTime": int(rewritten),
    }
