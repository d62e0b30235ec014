"""Read side of log sources, checkpoints, anomalies and events waiting for their attempt."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from app.evidence.models import Anomaly, Checkpoint, LogSource, PendingLogEvent, StackCapture
from app.infra.pagination import Page, PageRequest, paginate
from app.infra.sql import by_ids, first_per_group, rows_in, scalars_in
from app.jobs.models import Attempt

# Anomaly kinds the advisor decides on.
DECIDED_KINDS = ("CRASH", "NO_PROGRESS", "SLOWDOWN")
# The judgment of a stack capture (app/evidence/stack_captures.py): re-weighs the attempt with the anomaly that made
# Recovery end it (its node joins the blamed nodes), never decided on by itself.
STACK = "STACK"
# A crash line printed after Recovery sent requeue-hold or cancel for its attempt: the ending Recovery
# caused, kept for the record and shown apart, never decided on and never a root cause.
AFTER_RECOVERY_ACTED = "AFTER_RECOVERY_ACTED"

# ---- checkpoints and anomalies ----------------------------------------------------------------


async def latest_checkpoints_of_attempts(
    session: AsyncSession, *, attempt_ids: Sequence[int], limit: int
) -> dict[int, list[Checkpoint]]:
    """The newest `limit` checkpoints of each attempt, in one statement."""
    return await first_per_group(
        session, Checkpoint, Checkpoint.attempt_id, attempt_ids, (Checkpoint.id.desc(),), limit
    )


async def latest_anomalies_of_attempts(
    session: AsyncSession, *, attempt_ids: Sequence[int], limit: int
) -> dict[int, list[Anomaly]]:
    """The newest `limit` anomalies of each attempt, in one statement."""
    return await first_per_group(session, Anomaly, Anomaly.attempt_id, attempt_ids, (Anomaly.id.desc(),), limit)


async def _newest_first(session: AsyncSession, model: Any, kind: str, attempt_id: int, page: PageRequest) -> Page:
    """One page of an attempt's rows of `model` (anomalies or checkpoints), newest first."""
    return await paginate(
        session,
        select(model).where(model.attempt_id == attempt_id),
        kind=kind,
        columns=(model.id,),
        descending=True,
        request=page,
    )


async def list_checkpoints(session: AsyncSession, *, attempt_id: int, page: PageRequest) -> Page[Checkpoint]:
    """One page of an attempt's checkpoints, newest first."""
    return await _newest_first(session, Checkpoint, "checkpoints", attempt_id, page)


async def list_anomalies(session: AsyncSession, *, attempt_id: int, page: PageRequest) -> Page[Anomaly]:
    """One page of an attempt's anomalies, newest first."""
    return await _newest_first(session, Anomaly, "anomalies", attempt_id, page)


async def checkpoints_by_ids(session: AsyncSession, *, ids: Sequence[int]) -> dict[int, Checkpoint]:
    """Checkpoints by id, in one statement."""
    return await by_ids(session, Checkpoint, ids)


async def anomalies_by_ids(session: AsyncSession, *, ids: Sequence[int]) -> dict[int, Anomaly]:
    """Anomalies by id, in one statement."""
    return await by_ids(session, Anomaly, ids)


async def get_anomaly(session: AsyncSession, *, anomaly_id: int) -> Anomaly | None:
    """One anomaly by id."""
    return await session.get(Anomaly, anomaly_id)


async def newest_anomaly_of_workflows(
    session: AsyncSession, *, workflow_ids: Sequence[int]
) -> dict[int, tuple[Anomaly, int, int]]:
    """Per workflow: its newest anomaly with the (Slurm job id, attempt index) it was found on, in one statement."""
    if not workflow_ids:
        return {}
    rank = func.row_number().over(partition_by=Attempt.workflow_id, order_by=Anomaly.id.desc()).label("rank")
    inner = (
        select(
            Anomaly.id.label("anomaly_id"),
            Attempt.workflow_id.label("workflow_id"),
            Attempt.slurm_job_id,
            Attempt.attempt_index,
            rank,
        )
        .join(Attempt, Attempt.id == Anomaly.attempt_id)
        .where(Attempt.workflow_id.in_(list(set(workflow_ids))))
        .subquery()
    )
    newest = await session.execute(
        select(Anomaly, inner.c.workflow_id, inner.c.slurm_job_id, inner.c.attempt_index)
        .join(inner, inner.c.anomaly_id == Anomaly.id)
        .where(inner.c.rank == 1)
    )
    return {workflow_id: (anomaly, job, index) for anomaly, workflow_id, job, index in newest.all()}


async def latest_anomaly_id(session: AsyncSession) -> int:
    """The id of the newest anomaly (0 when there is none): where a new reader starts."""
    return int(await session.scalar(select(func.max(Anomaly.id))) or 0)


async def anomalies_after(session: AsyncSession, *, after_id: int, limit: int) -> list[tuple[int, int, str]]:
    """(id, attempt id, kind) of anomalies recorded after `after_id`, oldest first."""
    rows = await session.execute(
        select(Anomaly.id, Anomaly.attempt_id, Anomaly.kind)
        .where(Anomaly.id > after_id)
        .order_by(Anomaly.id)
        .limit(limit)
    )
    return [(anomaly_id, attempt_id, kind) for anomaly_id, attempt_id, kind in rows.all()]


async def anomalies_of_attempts(session: AsyncSession, *, attempt_ids: Sequence[int]) -> list[Anomaly]:
    """Every anomaly of these attempts, in the order they were recorded."""
    rows: list[Anomaly] = await scalars_in(
        session, select(Anomaly).order_by(Anomaly.id), Anomaly.attempt_id, sorted(set(attempt_ids))
    )
    return sorted(rows, key=lambda row: row.id)


async def checkpoint_summary(session: AsyncSession, *, attempt_ids: Sequence[int]) -> dict[int, tuple[int, int | None]]:
    """Per attempt: how many checkpoint saves were recorded and the highest saved iteration."""
    if not attempt_ids:
        return {}
    query = (
        select(Checkpoint.attempt_id, func.count(Checkpoint.id), func.max(Checkpoint.iteration))
        .where(Checkpoint.kind == "saved")
        .group_by(Checkpoint.attempt_id)
    )
    rows = await rows_in(session, query, Checkpoint.attempt_id, sorted(set(attempt_ids)))
    return {
        attempt_id: (int(count), int(iteration) if iteration is not None else None)
        for attempt_id, count, iteration in rows
    }


# ---- log sources ------------------------------------------------------------------------------


async def armed_sources(session: AsyncSession) -> list[tuple[LogSource, Attempt]]:
    """Armed, open log sources with the attempt Job Manager knows for them (its own, or the job's newest): one query."""
    newest = aliased(Attempt)
    newest_id = (
        select(newest.id)
        .where(newest.job_id == LogSource.job_id)
        .order_by(newest.attempt_index.desc())
        .limit(1)
        .correlate(LogSource)
        .scalar_subquery()
    )
    rows = (
        await session.execute(
            select(LogSource, Attempt)
            .join(Attempt, Attempt.id == func.coalesce(LogSource.attempt_id, newest_id))
            .where(LogSource.progress_phase.is_not(None), LogSource.closed_at.is_(None))
            .order_by(LogSource.id)
        )
    ).all()
    return [(row[0], row[1]) for row in rows]


async def get_log_source(session: AsyncSession, *, source_id: int) -> LogSource | None:
    """One log source by id."""
    return await session.get(LogSource, source_id)


async def log_sources_by_ids(session: AsyncSession, *, ids: Sequence[int]) -> list[LogSource]:
    """Log sources by id, one statement per 500 ids."""
    return list(await scalars_in(session, select(LogSource), LogSource.id, sorted(set(ids))))


async def log_sources_of_jobs(session: AsyncSession, *, job_ids: Sequence[int], open_ones: bool = False) -> list[Any]:
    """The log sources of these jobs; with `open_ones` also every open source of any job."""
    rows: list[Any] = await scalars_in(session, select(LogSource), LogSource.job_id, job_ids)
    if open_ones:
        rows += (await session.scalars(select(LogSource).where(LogSource.closed_at.is_(None)))).all()
    return rows


async def next_pending_at(session: AsyncSession) -> dt.datetime | None:
    """When the earliest waiting event is due again (None: none waits)."""
    return await session.scalar(select(func.min(PendingLogEvent.next_try_at)))


async def due_pending(
    session: AsyncSession, *, now: dt.datetime | None, limit: int = 200
) -> Sequence[tuple[PendingLogEvent, LogSource]]:
    """Waiting events whose next try is due (all of them when now is None), oldest first."""
    query = select(PendingLogEvent, LogSource).join(LogSource, LogSource.id == PendingLogEvent.log_source_id)
    if now is not None:
        query = query.where(PendingLogEvent.next_try_at <= now)
    rows = (await session.execute(query.order_by(PendingLogEvent.next_try_at, PendingLogEvent.id).limit(limit))).all()
    return [(row[0], row[1]) for row in rows]


# ---- what decisions need: an attempt's crash anomalies and its latest progress line ------------------


async def crash_anomalies(session: AsyncSession, *, attempt_ids: Iterable[int]) -> dict[int, list[Anomaly]]:
    """Per attempt, its CRASH anomalies in the order they were recorded."""
    ids = sorted(set(attempt_ids))
    if not ids:
        return {}
    rows = await session.scalars(
        select(Anomaly).where(Anomaly.attempt_id.in_(ids), Anomaly.kind == "CRASH").order_by(Anomaly.id)
    )
    found: dict[int, list[Anomaly]] = {}
    for row in rows:
        found.setdefault(row.attempt_id, []).append(row)
    return found


async def progress_lines(session: AsyncSession, *, attempt_ids: Iterable[int]) -> dict[int, str]:
    """Per attempt, the latest progress-marker line a log source recorded for it (the newest source wins)."""
    ids = sorted(set(attempt_ids))
    if not ids:
        return {}
    rows = await session.execute(
        select(LogSource.progress_attempt_id, LogSource.attempt_id, LogSource.progress_line)
        .where(
            LogSource.progress_line.is_not(None),
            or_(LogSource.progress_attempt_id.in_(ids), LogSource.attempt_id.in_(ids)),
        )
        .order_by(LogSource.progress_at)
    )
    found: dict[int, str] = {}
    for progress_attempt, owner, line in rows:
        attempt_id = progress_attempt if progress_attempt is not None else owner
        if attempt_id in ids and line:
            found[attempt_id] = line
    return found


async def tracked_log_paths(session: AsyncSession, *, attempt_id: int, job_id: int) -> set[str]:
    """Every log path Recovery tracks for this attempt: its log sources (own or shared with the job) and evidence."""
    paths: set[str] = set()
    sources = await session.scalars(
        select(LogSource.path).where(
            or_(LogSource.attempt_id == attempt_id, (LogSource.job_id == job_id) & LogSource.shared.is_(True))
        )
    )
    paths.update(sources.all())
    for model in (Anomaly, Checkpoint):
        found = await session.scalars(
            select(model.log_path).where(model.attempt_id == attempt_id, model.log_path.is_not(None)).distinct()
        )
        paths.update(p for p in found.all() if p)
    return paths


async def newest_saved_checkpoint(session: AsyncSession, *, attempt_id: int) -> Checkpoint | None:
    """The attempt's most recently recorded checkpoint save (the one a restart would load)."""
    query = (
        select(Checkpoint)
        .where(Checkpoint.attempt_id == attempt_id, Checkpoint.kind == "saved")
        .order_by(Checkpoint.id.desc())
        .limit(1)
    )
    return (await session.scalars(query)).first()


async def accepted_log_files(session: AsyncSession, *, attempt_id: int, job_id: int) -> dict[str, tuple[int, int]]:
    """Path -> (device, inode) of this attempt's log files the collector opened and read, and did not refuse since."""
    rows = await session.execute(
        select(LogSource.path, LogSource.device, LogSource.inode).where(
            or_(LogSource.attempt_id == attempt_id, (LogSource.job_id == job_id) & LogSource.shared.is_(True)),
            LogSource.inode.is_not(None),
            LogSource.device.is_not(None),
            LogSource.refused_reason.is_(None),
        )
    )
    return {path: (device, inode) for path, device, inode in rows.all() if device is not None and inode is not None}


async def refused_log_files(session: AsyncSession, *, attempt_id: int, job_id: int) -> dict[str, str]:
    """Path -> reason of this attempt's log files whose last open was refused (app/jobfiles/safe_open.py reasons)."""
    rows = await session.execute(
        select(LogSource.path, LogSource.refused_reason).where(
            or_(LogSource.attempt_id == attempt_id, (LogSource.job_id == job_id) & LogSource.shared.is_(True)),
            LogSource.refused_reason.is_not(None),
        )
    )
    return {path: reason for path, reason in rows.all() if reason}


# ---- stack captures -----------------------------------------------------------------------------


async def stack_capture_of_attempt(session: AsyncSession, *, attempt_id: int) -> StackCapture | None:
    """The attempt's stack capture, if one was taken."""
    return await session.scalar(select(StackCapture).where(StackCapture.attempt_id == attempt_id))


async def stack_captures_of_attempts(session: AsyncSession, *, attempt_ids: Sequence[int]) -> dict[int, StackCapture]:
    """Stack captures by attempt id."""
    if not attempt_ids:
        return {}
    rows = await session.scalars(select(StackCapture).where(StackCapture.attempt_id.in_(list(attempt_ids))))
    return {row.attempt_id: row for row in rows}
