"""Write side of log evidence: anomalies, checkpoints, log sources and events waiting for their attempt.

Every function takes the caller's session and writes in its transaction. Anomalies and checkpoints
are keyed by a deterministic event key and inserted with insert-or-ignore (SQLite and PostgreSQL),
so re-reading the same bytes after a restart records nothing twice.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from app.advice.models import Advice, SchedulerAction
from app.audit import service as audit
from app.domain.control import states
from app.domain.decision import rootcause
from app.domain.detection import association as assoc
from app.domain.detection import line_nodes, slowdown, stacks
from app.domain.detection.hang import ProgressState
from app.domain.detection.signatures import CheckpointEvent, CrashSignature, ProgressMarker
from app.evidence import queries as evidence_queries
from app.evidence.models import Anomaly, Checkpoint, LogSource, PendingLogEvent, StackCapture
from app.evidence.queries import AFTER_RECOVERY_ACTED, STACK
from app.feed import service as feed
from app.infra import metrics
from app.infra.db import dialect_of, utcnow
from app.jobfiles.reader import FilePosition, LogEvent
from app.jobs import queries as job_queries
from app.jobs import service as job_service
from app.jobs.models import Attempt, Job

CRASH = "CRASH"
NO_PROGRESS = "NO_PROGRESS"
SLOWDOWN = "SLOWDOWN"
_ACTING_STEPS = ("requeue_hold", "cancel")
_SENT = ("STARTED", "SUCCEEDED")
MAX_LINE = 4000


@dataclass(frozen=True)
class LineEvent:
    """A crash or checkpoint line as the evidence layer needs it (from the reader or a pending row)."""

    event_key: str
    log_path: str
    line_number: int
    line: str
    source_time: dt.datetime | None
    read_at: dt.datetime
    signal: CrashSignature | CheckpointEvent
    attempt_label: int | None = None
    # Other lines of the file naming the failed process's PID (a launcher summary's context), for its node.
    context: tuple[str, ...] = ()


def signal_to_json(signal: CrashSignature | CheckpointEvent) -> dict[str, Any]:
    """A signal as plain JSON (so a waiting event keeps what its line meant)."""
    data = asdict(signal)
    data["type"] = "crash" if isinstance(signal, CrashSignature) else "checkpoint"
    if "nodes" in data:
        data["nodes"] = list(data["nodes"])
    return data


def signal_from_json(data: dict[str, Any]) -> CrashSignature | CheckpointEvent:
    values = {k: v for k, v in data.items() if k != "type"}
    if data.get("type") == "crash":
        values["nodes"] = tuple(values.get("nodes") or ())
        return CrashSignature(**values)
    return CheckpointEvent(**values)


def derived_key(*parts: object) -> str:
    """A deterministic event key for detector findings that are not a single line."""
    return hashlib.sha256("\0".join(str(p) for p in parts).encode()).hexdigest()[:32]


async def _insert_ignore(session: AsyncSession, model: Any, values: dict[str, Any]) -> int | None:
    """INSERT … ON CONFLICT (event_key) DO NOTHING; the new row's id, or None when it already existed."""
    dialect: Any = postgresql if dialect_of(session) == "postgresql" else sqlite
    statement = (
        dialect.insert(model).values(**values).on_conflict_do_nothing(index_elements=["event_key"]).returning(model.id)
    )
    return await session.scalar(statement)


def _evidence_payload(
    log_path: str | None, line_number: int | None, line: str | None, source_time: dt.datetime | None
) -> dict[str, Any]:
    return {
        "file": log_path,
        "lineNumber": line_number,
        "line": (line or "")[:MAX_LINE],
        "sourceTime": source_time.isoformat() if source_time else None,
    }


async def record_anomaly(
    session: AsyncSession,
    *,
    attempt: Attempt,
    kind: str,
    category: str,
    detector: str,
    event_key: str,
    message: str,
    node: str | None = None,
    xid: int | None = None,
    log_path: str | None = None,
    line_number: int | None = None,
    line: str | None = None,
    source_time: dt.datetime | None = None,
    details: dict[str, Any] | None = None,
    outlook: str | None = None,
    blamed_nodes: list[dict[str, Any]] | None = None,
) -> Anomaly | None:
    """Record an anomaly once (by event key) with its `anomaly.detected` audit event and feed entry.

    Returns the new row, or None when this event was recorded before.
    """
    now = utcnow()
    new_id = await _insert_ignore(
        session,
        Anomaly,
        {
            "attempt_id": attempt.id,
            "event_key": event_key,
            "kind": kind,
            "category": category,
            "detector": detector,
            "message": message[:MAX_LINE],
            "node": node,
            "xid": xid,
            "log_path": log_path,
            "line_number": line_number,
            "line": line[:MAX_LINE] if line is not None else None,
            "source_time": source_time,
            "details": details or {},
            "detected_at": now,
            "outlook": outlook,
            "blamed_nodes": blamed_nodes,
        },
    )
    if new_id is None:
        return None
    latency = metrics.seconds_since(source_time, now)
    if latency is not None:
        metrics.DETECTION_LATENCY.labels(kind, detector).observe(latency)
    anomaly = await session.get(Anomaly, new_id)
    await audit.record(
        session,
        component="watcher",
        event_type="anomaly.detected",
        level="ERROR" if kind == CRASH else "WARNING",
        message=f"attempt {attempt.slurm_job_id}/{attempt.attempt_index}: {kind} {category}: {message}"[:MAX_LINE],
        payload={
            "anomalyId": new_id,
            "kind": kind,
            "category": category,
            "detector": detector,
            "node": node,
            "xid": xid,
            "outlook": outlook,
            "blamedNodes": blamed_nodes or [],
            **_evidence_payload(log_path, line_number, line, source_time),
            "details": details or {},
        },
        cluster=attempt.cluster,
        slurm_job_id=attempt.slurm_job_id,
        attempt_index=attempt.attempt_index,
        workflow_id=attempt.workflow_id,
        produced_at=now,
    )
    await feed.announce(
        session,
        topic="anomaly",
        entity_id=new_id,
        about=attempt,
        payload={"kind": kind, "category": category, "node": node, "xid": xid, "outlook": outlook},
    )
    return anomaly


async def recovery_acted_at(session: AsyncSession, *, attempt_id: int) -> tuple[dt.datetime, str] | None:
    """When Recovery first sent requeue-hold or cancel for this attempt (and which), or None."""
    row = (
        await session.execute(
            select(SchedulerAction.started_at, SchedulerAction.step)
            .join(Advice, Advice.id == SchedulerAction.advice_id)
            .where(
                Advice.attempt_id == attempt_id,
                SchedulerAction.step.in_(_ACTING_STEPS),
                SchedulerAction.status.in_(_SENT),
            )
            .order_by(SchedulerAction.started_at)
            .limit(1)
        )
    ).first()
    return (row[0], row[1]) if row is not None else None


def _after(line_time: dt.datetime, acted: dt.datetime) -> bool:
    aware = line_time if line_time.tzinfo is not None else line_time.replace(tzinfo=dt.UTC)
    sent = acted if acted.tzinfo is not None else acted.replace(tzinfo=dt.UTC)
    return aware >= sent


PROCESS_LINES = 5  # lines naming the failed PID or rank kept with an anomaly recorded before the node list was known


def process_lines(context: Sequence[str]) -> list[str]:
    """The lines naming the failed process, bounded, for matching against the node list once Slurm reports it."""
    return [line[:300] for line in context[:PROCESS_LINES]]


async def record_crash(session: AsyncSession, *, attempt: Attempt, event: LineEvent) -> Anomaly | None:
    """A crash line becomes a CRASH anomaly (first line per category, node and Xid of the attempt).

    Every rank of a failing run prints the same error; the advisor needs each distinct node, not
    every copy, so repeats of the same (category, node, xid) are not recorded again. A line printed
    (source time, else read time) after Recovery sent requeue-hold or cancel is kept apart as
    AFTER_RECOVERY_ACTED: the survivors' SIGTERM and srun's `Terminated` are Recovery's doing.
    """
    signal = event.signal
    assert isinstance(signal, CrashSignature)
    allocation = tuple(attempt.nodes or ())
    line_finding = rootcause.Finding(
        category=signal.category,
        rule=signal.rule,
        line=event.line,
        detail=signal.detail,
        nodes=signal.nodes,
        rank=signal.rank,
        xid=signal.xid,
        first_observed=signal.first_observed,
    )
    finding = line_nodes.with_line_nodes(line_finding, allocation, attempt.tasks_per_node, event.context)
    node = finding.nodes[0] if finding.nodes else None
    # A node the line itself does not name came from the launcher's block around it or a line naming the failed
    # process: say which.
    own = line_nodes.with_line_nodes(line_finding, allocation, attempt.tasks_per_node).nodes
    source = line_nodes.context_line(node, event.context, allocation) if node and not own else None
    block = bool(node and node not in line_nodes.nodes_in_line(event.line, allocation))
    block = block and bool(line_nodes.LAUNCHER_BLOCK_FIELD.match(event.line)) and node in own
    acted = await recovery_acted_at(session, attempt_id=attempt.id)
    after = acted is not None and _after(event.source_time or event.read_at, acted[0])
    kind = AFTER_RECOVERY_ACTED if after else CRASH
    repeats = (
        await session.scalars(
            select(Anomaly.details)
            .where(
                Anomaly.attempt_id == attempt.id,
                Anomaly.kind == kind,
                Anomaly.category == signal.category,
                Anomaly.node.is_(None) if node is None else Anomaly.node == node,
                Anomaly.xid.is_(None) if signal.xid is None else Anomaly.xid == signal.xid,
            )
            .limit(2)
        )
    ).all()
    # A repeat is recorded once more only when it tells more: it is the first to say which rank failed (torchrun's
    # block after its `failed (exitcode: -9)` line), or it is the original exception of a re-raise recorded so far
    # (PyTorch's "Caught ValueError in DataLoader worker process 0" above the worker's "Original Traceback").
    names_rank = signal.rank is not None and all((d or {}).get("rank") is None for d in repeats)
    original = not rootcause.reraised(line_finding) and any(
        rootcause.reraise_text(str((d or {}).get("detail") or "")) for d in repeats
    )
    if repeats and not (names_rank or original):
        return None
    attribution = rootcause.attribute(finding, attempt_nodes=allocation, tasks_per_node=attempt.tasks_per_node)
    blamed = [node.to_json() for node in attribution.blamed]
    where = f"{os.path.basename(event.log_path)}:{event.line_number}"
    dirs = tuple(
        dict.fromkeys(
            os.path.dirname(p) for p in (attempt.stdout_path, attempt.stderr_path) if p and os.path.dirname(p)
        )
    )
    signature = rootcause.fingerprint(signal.category, signal.detail or event.line, job_dirs=dirs)
    details: dict[str, Any] = {
        "rule": signal.rule,
        "nodes": list(finding.nodes),
        "rank": signal.rank,
        "detail": signal.detail,
        "readTime": event.read_at.isoformat(),
        "signature": signature,
        "fingerprint": rootcause.fingerprint_id(signature),
        **({"knownConsequence": True} if rootcause.known_consequence(finding) else {}),
        **({"firstObserved": True} if signal.first_observed else {}),
        **({"processLines": process_lines(event.context)} if event.context and not allocation else {}),
        **({"nodeFrom": line_nodes.CONTEXT_SOURCE, "nodeFromLine": source} if source else {}),
        **({"nodeFrom": line_nodes.BLOCK_SOURCE} if block else {}),
        **({"attributionNote": attribution.note} if attribution.note else {}),
    }
    await name_root_cause_node(session, attempt=attempt, finding=finding, after=after)
    if after:
        assert acted is not None
        details["afterRecoveryActed"] = {"step": acted[1], "sentAt": acted[0].isoformat()}
        return await _record_after_action(session, attempt=attempt, event=event, node=node, details=details)
    return await record_anomaly(
        session,
        attempt=attempt,
        kind=CRASH,
        category=signal.category,
        detector="signature",
        event_key=event.event_key,
        message=f"{signal.category} at {where}"
        + (f" on {node}" if node else "")
        + (f" (Xid {signal.xid})" if signal.xid is not None else ""),
        node=node,
        xid=signal.xid,
        log_path=event.log_path,
        line_number=event.line_number,
        line=event.line,
        source_time=event.source_time,
        details=details,
        outlook=rootcause.outlook_of_finding(finding),
        blamed_nodes=blamed,
    )


async def _record_after_action(
    session: AsyncSession, *, attempt: Attempt, event: LineEvent, node: str | None, details: dict[str, Any]
) -> Anomaly | None:
    """Keep a crash line printed after Recovery acted: no anomaly.detected event, no decision, no blame."""
    signal = event.signal
    assert isinstance(signal, CrashSignature)
    step = details["afterRecoveryActed"]["step"].replace("_", "-")
    message = f"{signal.category} at {os.path.basename(event.log_path)}:{event.line_number}, after Recovery sent {step}"
    new_id = await _insert_ignore(
        session,
        Anomaly,
        {
            "attempt_id": attempt.id,
            "event_key": event.event_key,
            "kind": AFTER_RECOVERY_ACTED,
            "category": signal.category,
            "detector": "signature",
            "message": message[:MAX_LINE],
            "node": node,
            "xid": signal.xid,
            "log_path": event.log_path,
            "line_number": event.line_number,
            "line": event.line[:MAX_LINE],
            "source_time": event.source_time,
            "details": details,
            "detected_at": utcnow(),
            "outlook": None,
            "blamed_nodes": [],
        },
    )
    if new_id is None:
        return None
    await audit.record(
        session,
        component="watcher",
        event_type="evidence.after_recovery_acted",
        message=f"attempt {attempt.slurm_job_id}/{attempt.attempt_index}: {message}"[:MAX_LINE],
        payload={
            "anomalyId": new_id,
            "category": signal.category,
            **_evidence_payload(event.log_path, event.line_number, event.line, event.source_time),
            "details": details,
        },
        cluster=attempt.cluster,
        slurm_job_id=attempt.slurm_job_id,
        attempt_index=attempt.attempt_index,
        workflow_id=attempt.workflow_id,
    )
    return None  # kept apart: not a new anomaly of the attempt


async def record_checkpoint(session: AsyncSession, *, attempt: Attempt, event: LineEvent) -> Checkpoint | None:
    """A checkpoint saved/loaded line becomes a Checkpoint row (evidence of the event, not of a loadable file)."""
    signal = event.signal
    assert isinstance(signal, CheckpointEvent)
    new_id = await _insert_ignore(
        session,
        Checkpoint,
        {
            "attempt_id": attempt.id,
            "event_key": event.event_key,
            "kind": signal.kind,
            "framework": signal.framework or None,
            "iteration": signal.iteration,
            "path": signal.path,
            "log_path": event.log_path,
            "line_number": event.line_number,
            "line": event.line[:MAX_LINE],
            "source_time": event.source_time,
            "read_time": event.read_at,
        },
    )
    if new_id is None:
        return None
    await audit.record(
        session,
        component="collector",
        event_type=f"checkpoint.{signal.kind}",
        message=f"attempt {attempt.slurm_job_id}/{attempt.attempt_index}: checkpoint {signal.kind}"
        + (f" at iteration {signal.iteration}" if signal.iteration is not None else "")
        + (f" ({signal.path})" if signal.path else ""),
        payload={
            "checkpointId": new_id,
            "kind": signal.kind,
            "framework": signal.framework,
            "iteration": signal.iteration,
            "path": signal.path,
            **_evidence_payload(event.log_path, event.line_number, event.line, event.source_time),
        },
        cluster=attempt.cluster,
        slurm_job_id=attempt.slurm_job_id,
        attempt_index=attempt.attempt_index,
        workflow_id=attempt.workflow_id,
    )
    await feed.announce(
        session,
        topic="checkpoint",
        entity_id=new_id,
        about=attempt,
        payload={"kind": signal.kind, "iteration": signal.iteration},
    )
    return await session.get(Checkpoint, new_id)


async def record_line_event(
    session: AsyncSession, *, attempt: Attempt, event: LineEvent
) -> Anomaly | Checkpoint | None:
    """Record a crash or checkpoint line on its attempt; None when already recorded (or a repeat)."""
    if isinstance(event.signal, CrashSignature):
        return await record_crash(session, attempt=attempt, event=event)
    return await record_checkpoint(session, attempt=attempt, event=event)


async def observe_throughput(
    session: AsyncSession,
    *,
    source: LogSource,
    attempt: Attempt,
    values: dict[str, float],
    at: dt.datetime,
    line_number: int | None,
    line: str | None,
    source_time: dt.datetime | None,
    drop_ratio: float,
    duration: float,
) -> Anomaly | None:
    """Feed one throughput sample to the slowdown detector; a sustained drop becomes a SLOWDOWN anomaly."""
    state = slowdown.SlowdownState.from_json(source.slowdown)
    state, verdict = slowdown.observe(
        state, attempt_id=attempt.id, values=values, at=at, drop_ratio=drop_ratio, duration=duration
    )
    source.slowdown = state.to_json()
    if verdict is None:
        return None
    return await record_anomaly(
        session,
        attempt=attempt,
        kind=SLOWDOWN,
        category="THROUGHPUT_DROP",
        detector="slowdown",
        event_key=derived_key("slowdown", attempt.id, source.id, verdict.since.isoformat()),
        message=f"{verdict.metric} at {verdict.ratio:.0%} of the attempt's baseline for "
        f"{(at - verdict.since).total_seconds():.0f} s",
        log_path=source.path,
        line_number=line_number,
        line=line,
        source_time=source_time,
        details={
            "metric": verdict.metric,
            "baseline": verdict.baseline,
            "value": verdict.value,
            "ratio": round(verdict.ratio, 4),
            "since": verdict.since.isoformat(),
            "samples": verdict.samples,
            "dropRatio": drop_ratio,
            "duration": duration,
        },
    )


async def store_blame(session: AsyncSession, *, blamed: dict[int, list[dict[str, Any]]]) -> None:
    """Fill in blamed nodes derived after the fact (the attempt's node list arrived after its crash line)."""
    for anomaly_id, nodes in blamed.items():
        row = await session.get(Anomaly, anomaly_id)
        if row is not None and not row.blamed_nodes:
            row.blamed_nodes = nodes


ROOT_CAUSE = "root cause"
CONSEQUENCE = "consequence"


async def store_roles(session: AsyncSession, *, root_cause_id: int, crash_ids: list[int]) -> None:
    """Mark an attempt's crash anomalies as its root cause or a consequence of it (the anomaly table shows it)."""
    for anomaly_id in crash_ids:
        row = await session.get(Anomaly, anomaly_id)
        role = ROOT_CAUSE if anomaly_id == root_cause_id else CONSEQUENCE
        if row is not None and (row.details or {}).get("role") != role:
            row.details = {**(row.details or {}), "role": role}


async def store_failed_node(session: AsyncSession, *, anomaly_id: int, node: str, provenance: str) -> None:
    """Name the node of a root-cause anomaly whose own line did not, saying how it was found (`nodeFrom`)."""
    row = await session.get(Anomaly, anomaly_id)
    if row is not None and row.node is None:
        row.node = node
        row.details = {**(row.details or {}), "nodeFrom": provenance}


async def name_root_cause_node(
    session: AsyncSession, *, attempt: Attempt, finding: rootcause.Finding, after: bool
) -> None:
    """A line read after the attempt's root cause was decided names the root cause's node when nothing did yet:
    the launcher's report of the same rank (its host), or, before Recovery acted, srun's first failed task
    (Recovery often decides before either is printed)."""
    task = rootcause.srun_failed_task(finding.line)
    reports_rank = finding.rank is not None and bool(finding.nodes) and not rootcause.srun_task_line(finding.line)
    if after:
        task = None  # srun's exit order after Recovery acted is Recovery's doing
    if task is None and not reports_rank:
        return
    rows = list(await session.scalars(select(Anomaly).where(Anomaly.attempt_id == attempt.id, Anomaly.kind == CRASH)))
    root = next((row for row in rows if (row.details or {}).get("role") == ROOT_CAUSE), None)
    if root is None or root.node is not None:
        return
    rank = (root.details or {}).get("rank")
    if reports_rank and rank == finding.rank:
        provenance = f"the launcher's report of rank {rank} names its host"
        await store_failed_node(session, anomaly_id=root.id, node=finding.nodes[0], provenance=provenance)
    elif task is not None and not any(rootcause.srun_failed_task(row.line or "") for row in rows):
        await store_failed_node(
            session, anomaly_id=root.id, node=task[0], provenance=rootcause.srun_provenance(task[1])
        )


# ---- events that wait for their attempt -------------------------------------------------------


async def defer_events(
    session: AsyncSession, *, source: LogSource, waiting: list[tuple[LineEvent, str]], next_try_at: dt.datetime
) -> None:
    """Keep undecided events (event, reason) for bounded redelivery in one statement; those waiting already stay."""
    if not waiting:
        return
    dialect: Any = postgresql if dialect_of(session) == "postgresql" else sqlite
    table = PendingLogEvent.__table__  # Core rows: not the ORM's per-row bulk path
    statement = dialect.insert(table).on_conflict_do_nothing(index_elements=["event_key"])
    rows = [_pending_values(source, event, reason=reason, next_try_at=next_try_at) for event, reason in waiting]
    await session.execute(statement, rows)


def _pending_values(source: LogSource, event: LineEvent, *, reason: str, next_try_at: dt.datetime) -> dict[str, Any]:
    return {
        "log_source_id": source.id,
        "event_key": event.event_key,
        "line_number": event.line_number,
        "line": event.line[:MAX_LINE],
        "source_time": event.source_time,
        "attempt_label": event.attempt_label,
        "signal": signal_to_json(event.signal),
        "reason": reason,
        "tries": 0,
        "next_try_at": next_try_at,
        "read_time": event.read_at,
    }


def pending_to_event(row: PendingLogEvent, log_path: str) -> LineEvent:
    return LineEvent(
        event_key=row.event_key,
        log_path=log_path,
        line_number=row.line_number,
        line=row.line,
        source_time=row.source_time,
        read_at=row.read_time,
        signal=signal_from_json(row.signal or {}),
        attempt_label=row.attempt_label,
    )


async def drop_event(
    session: AsyncSession,
    *,
    job: Job | None,
    log_path: str,
    event: LineEvent,
    reason: str,
    tries: int,
    attempt_index: int | None = None,
) -> None:
    """Give up on an event (its attempt cannot be told): say so in the audit log with the reason."""
    kind = "crash" if isinstance(event.signal, CrashSignature) else "checkpoint"
    await audit.record(
        session,
        component="collector",
        event_type="collector.event_dropped",
        level="WARNING",
        message=f"{kind} line {os.path.basename(log_path)}:{event.line_number} not attributed to any "
        f"attempt ({reason})",
        payload={
            "reason": reason,
            "tries": tries,
            "kind": kind,
            "eventKey": event.event_key,
            "attemptLabel": event.attempt_label,
            **_evidence_payload(log_path, event.line_number, event.line, event.source_time),
        },
        cluster=job.cluster if job else None,
        slurm_job_id=job.slurm_job_id if job else None,
        attempt_index=attempt_index,
        workflow_id=job.workflow_id if job else None,
    )


async def delete_pending(session: AsyncSession, *, pending: PendingLogEvent) -> None:
    """Forget a waiting event: it was recorded on its attempt or dropped."""
    await session.delete(pending)


async def add_log_source(session: AsyncSession, *, path: str, job_id: int, attempt_id: int | None) -> LogSource:
    """Start tracking a file of a job (owned by one attempt, or shared when `attempt_id` is None)."""
    row = LogSource(path=path, job_id=job_id, attempt_id=attempt_id, shared=attempt_id is None, offset=0, line_number=0)
    session.add(row)
    return row


async def add_shared_log_source(session: AsyncSession, *, path: str, job_id: int | None) -> LogSource:
    """A log source read from pushed lines (its job may not be known yet: its lines then wait); flushed for its id."""
    row = LogSource(path=path, job_id=job_id, attempt_id=None, shared=True, offset=0, line_number=0)
    session.add(row)
    await session.flush()
    return row


async def give_log_source_job(session: AsyncSession, *, source: LogSource, job_id: int) -> None:
    """The job of a pushed stream became known: its waiting lines can now find their attempt."""
    source.job_id = job_id


async def _resolve_pushed_job(session: AsyncSession, source: LogSource) -> None:
    """A pushed stream's job registered after its lines arrived (`push://<cluster>/<job id>/...`): adopt it."""
    if source.job_id is not None or not source.path.startswith("push://"):
        return
    cluster, _, rest = source.path[len("push://") :].partition("/")
    job_text = rest.partition("/")[0]
    if not job_text.isdigit():
        return
    job = await job_queries.find_job(session, slurm_job_id=int(job_text), cluster=cluster)
    if job is not None:
        source.job_id = job.id


async def note_refusal(
    session: AsyncSession,
    *,
    source: LogSource,
    job: Job | None,
    attempt_index: int | None,
    reason: str | None,
    detail: str = "",
) -> bool:
    """Keep why a log source's path was last refused (None: not); a `log.refused` event once per attempt and reason.

    True when a new event was recorded. The event names the path, the reason and its detail (owner,
    mode, file type), never a byte of the file: nothing refused is read.
    """
    if source.refused_reason != reason:
        source.refused_reason = reason
    if reason is None:
        return False
    key = f"{attempt_index if attempt_index is not None else '-'}:{reason}"
    seen = list(source.refusals or [])
    if key in seen:
        return False
    source.refusals = [*seen, key]
    where = f"attempt {attempt_index}: " if attempt_index is not None else ""
    await audit.record(
        session,
        component="collector",
        event_type="log.refused",
        level="WARNING",
        message=f"{where}log file not read ({reason}): {detail}"[:MAX_LINE],
        payload={"file": source.path, "reason": reason, "detail": detail[:MAX_LINE], "logSourceId": source.id},
        cluster=job.cluster if job else None,
        slurm_job_id=job.slurm_job_id if job else None,
        attempt_index=attempt_index,
        workflow_id=job.workflow_id if job else None,
    )
    return True


async def reopen_log_source(session: AsyncSession, *, source: LogSource) -> None:
    """Read a shared file again: the job it belongs to runs again."""
    source.closed_at = None


async def start_hang_delay(session: AsyncSession, *, source: LogSource, episode: str, at: dt.datetime) -> None:
    """The file's silence passed the hang threshold: keep the episode and when its query delay started."""
    source.hang_episode, source.hang_delay_started_at, source.hang_checked_at = episode, at, None


async def note_hang_check(session: AsyncSession, *, source: LogSource, episode: str, at: dt.datetime) -> None:
    """The delayed hang check of this silence episode ran (once per episode, also across restarts)."""
    source.hang_episode, source.hang_checked_at = episode, at


# ---- one read of a log source -----------------------------------------------------------------

LAST_READ_TOUCH = dt.timedelta(seconds=60)  # how stale last_read_at may get while a file is idle


@dataclass(frozen=True)
class MarkerSeen:
    """A progress marker of a read, with the attempt it belongs to (`attempt_known` False: its job is not tracked)."""

    marker: LogEvent
    attempt_id: int | None = None
    attempt_known: bool = True


@dataclass(frozen=True)
class SourceRead:
    """What one read of a log source found, as its row keeps it."""

    position: FilePosition
    bytes_read: bool
    last_output_at: dt.datetime | None  # the newest output time of the read (None: no new bytes)
    replaced: bool  # truncated, rotated or deleted: the latest marker's place is gone
    markers: tuple[MarkerSeen, ...] = ()
    close: bool = False  # the final read: stop reading the file


async def store_read(session: AsyncSession, *, source: LogSource, read: SourceRead, now: dt.datetime) -> None:
    """Keep a read's position, output time and progress markers on its log source (and an attempt's first progress)."""
    changed = _store_position(source, read.position)
    if read.last_output_at is not None and (
        source.last_output_at is None or read.last_output_at > source.last_output_at
    ):
        source.last_output_at = read.last_output_at
        changed = True
    if read.replaced:
        source.progress_offset = None
    for seen in read.markers:
        armed_for = source.progress_attempt_id if source.progress_phase is not None else None
        if _observe_progress(source, seen):
            changed = True
            if source.progress_attempt_id not in (None, armed_for):  # goodput: an attempt's first progress
                await job_service.note_first_progress(
                    session, attempt_id=source.progress_attempt_id, at=source.progress_at
                )
    if changed or read.bytes_read or source.last_read_at is None or now - source.last_read_at > LAST_READ_TOUCH:
        source.last_read_at = now
    if read.close:
        source.closed_at = now


def _store_position(source: LogSource, position: FilePosition) -> bool:
    """Keep the reader's position whole (it resumes from it after a restart); True when it moved."""
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
        if getattr(source, name) != value:
            setattr(source, name, value)
            changed = True
    return changed


def _observe_progress(source: LogSource, seen: MarkerSeen) -> bool:
    """Arm the hang detector for the file (and the attempt the marker belongs to); True when that changed."""
    marker = seen.marker
    state = ProgressState(
        armed=source.progress_phase is not None,
        phase=source.progress_phase,
        marker_offset=source.progress_offset,
        marker_at=source.progress_at,
    )
    at = marker.source_time or marker.read_at
    assert isinstance(marker.signal, ProgressMarker)  # callers pass a progress marker
    new = state.observe(marker.signal, line_number=marker.line_number, offset=marker.offset, at=at)
    if new is state:
        return False
    source.progress_phase, source.progress_offset, source.progress_line_number = (
        new.phase,
        new.marker_offset,
        new.marker_line,
    )
    source.progress_at, source.progress_line = new.marker_at, marker.text[:2000]
    if source.attempt_id is not None:
        source.progress_attempt_id = source.attempt_id
    elif seen.attempt_known:
        source.progress_attempt_id = seen.attempt_id
    return True


@dataclass(frozen=True)
class LinesRecorded:
    """What became of a read's crash and checkpoint lines."""

    anomalies: int = 0  # new crash anomalies
    next_try_at: dt.datetime | None = None  # the earliest retry of a line kept waiting (None: none waits)


async def record_lines(
    session: AsyncSession,
    *,
    source: LogSource,
    owner: Attempt | None,
    windows: list[assoc.AttemptWindow] | None,
    events: list[LineEvent],
    now: dt.datetime,
    foreign: bool = False,
) -> LinesRecorded:
    """Record a read's lines on their attempt, keep the undecided ones waiting, drop the rest with an audit event.

    `owner`: the file's own attempt (None: a shared file, whose lines are attributed by label or time
    among `windows`, the job's attempts; None: read them). `foreign`: the file was truncated after its
    attempt ended, so its new lines are someone else's.
    """
    anomalies, next_try_at = 0, None
    waiting: list[tuple[LineEvent, str]] = []
    for event in events:
        if owner is not None:
            ended = owner.state not in states.ACTIVE
            if foreign or (ended and assoc.written_after_end(source_time=event.source_time, end=owner.end_time)):
                job = await job_queries.get_job(session, job_id=owner.job_id)
                await drop_event(
                    session,
                    job=job,
                    log_path=source.path,
                    event=event,
                    reason=assoc.AFTER_ATTEMPT_END,
                    tries=0,
                    attempt_index=owner.attempt_index,
                )
                continue
            anomalies += await _record_on(session, owner, event)
            continue
        if windows is None:
            windows = await _windows_of(session, source.job_id)
        decision = assoc.attribute_shared_event(
            label=event.attempt_label, source_time=event.source_time, windows=windows, now=now
        )
        if decision.decided:
            attempt = await job_queries.attempt_at(session, job_id=source.job_id, attempt_index=decision.attempt_index)
            if attempt is not None:
                anomalies += await _record_on(session, attempt, event)
                continue
        waiting.append((event, decision.reason or assoc.NO_ATTEMPTS))
    if waiting:  # one statement for all of a read's undecided lines (a job not registered yet: every one)
        next_try_at = now + dt.timedelta(seconds=assoc.next_retry_delay(0) or 0.0)
        await defer_events(session, source=source, waiting=waiting, next_try_at=next_try_at)
    return LinesRecorded(anomalies, next_try_at)


async def redeliver_pending(session: AsyncSession, *, now: dt.datetime, free: bool, limit: int) -> tuple[int, int]:
    """(new crash anomalies, events looked at): redeliver waiting events, counting a try on each one that was due.

    `free` retries every waiting event without counting a try (a new attempt was registered). An event
    that still has no attempt is tried again later, or dropped with an audit event after its last try.
    """
    anomalies = 0
    due = await evidence_queries.due_pending(session, now=None if free else now, limit=limit)
    for pending, source in due:
        scheduled = pending.next_try_at <= now
        await _resolve_pushed_job(session, source)
        event = pending_to_event(pending, source.path)
        windows = await _windows_of(session, source.job_id)
        decision = assoc.attribute_shared_event(
            label=event.attempt_label, source_time=event.source_time, windows=windows, now=now
        )
        if decision.decided:
            attempt = await job_queries.attempt_at(session, job_id=source.job_id, attempt_index=decision.attempt_index)
            if attempt is not None:
                anomalies += await _record_on(session, attempt, event)
                await delete_pending(session, pending=pending)
                continue
        if not scheduled:
            continue
        pending.tries += 1
        pending.reason = decision.reason
        delay = assoc.next_retry_delay(pending.tries)
        if delay is None:
            job = await job_queries.get_job(session, job_id=source.job_id) if source.job_id is not None else None
            await drop_event(
                session, job=job, log_path=source.path, event=event, reason=decision.reason, tries=pending.tries
            )
            await delete_pending(session, pending=pending)
        else:
            pending.next_try_at = now + dt.timedelta(seconds=delay)
    return anomalies, len(due)


async def _record_on(session: AsyncSession, attempt: Attempt, event: LineEvent) -> int:
    """Record a line event on its attempt: 1 when that is a new crash anomaly."""
    recorded = await record_line_event(session, attempt=attempt, event=event)
    return int(recorded is not None and isinstance(event.signal, CrashSignature))


async def _windows_of(session: AsyncSession, job_id: int | None) -> list[assoc.AttemptWindow]:
    if job_id is None:
        return []
    rows = await job_queries.attempts_of(session, job_id=job_id)
    return [assoc.AttemptWindow(a.attempt_index, a.start_time, a.end_time) for a in rows]


# ---- stack captures (before Recovery ends a RUNNING attempt: worker/stack_capture.py) ------------------------

CATEGORY = "stack_outlier"
DETECTOR = "stack"


@dataclass(frozen=True)
class TakenStacks:
    """What the worker's capture returned, as stored."""

    status: str
    command: str
    duration_ms: float
    bytes: int
    nodes_asked: Sequence[str]
    nodes_answered: Sequence[str]
    ranks: Sequence[stacks.RankStack]
    reports: list[dict[str, Any]]
    problems: Sequence[str]


def rank_json(stack: stacks.RankStack) -> dict[str, Any]:
    """One rank as stored."""
    return {
        "rank": stack.rank,
        "node": stack.node,
        "pid": stack.pid,
        "state": stack.state,
        "wchan": stack.wchan,
        "threads": stack.threads,
        "threadStates": list(stack.thread_states),
        "frames": [f.to_json() for f in stack.frames],
        "where": stacks.describe(stack),
        "error": stack.error,
        "flightSeq": stack.flight_seq,
    }


async def record_stack_capture(
    session: AsyncSession,
    *,
    attempt: Attempt,
    advice_id: int | None,
    mode: str | None,
    trigger_anomaly_id: int | None,
    taken: TakenStacks,
    now: dt.datetime | None = None,
) -> StackCapture:
    """Store the capture (once per attempt), its judgment's STACK anomaly, and the `stack.captured` audit event."""
    now = now or utcnow()
    judgment = stacks.judge(taken.ranks)
    if judgment is not None and judgment.blame_node and judgment.node not in set(taken.nodes_asked):
        # only a node of the attempt's own allocation is ever blamed, whatever a report says it is called
        judgment = dataclasses.replace(judgment, blame_node=False)
    outliers = [f"rank {judgment.rank}"] if judgment is not None and judgment.rank is not None else []
    groups = stacks.merge(taken.ranks, outliers)
    anomaly = await _record_judgment(session, attempt, judgment, trigger_anomaly_id) if judgment else None
    row = StackCapture(
        attempt_id=attempt.id,
        advice_id=advice_id,
        status=taken.status,
        mode=mode,
        command=taken.command,
        duration_ms=taken.duration_ms,
        bytes=taken.bytes,
        nodes_asked=list(taken.nodes_asked),
        nodes_answered=list(taken.nodes_answered),
        ranks=[rank_json(s) for s in taken.ranks],
        groups=[g.to_json() for g in groups],
        judgment=judgment.to_json() if judgment else None,
        reports=taken.reports,
        problems=list(taken.problems)[:50],
        anomaly_id=anomaly.id if anomaly is not None else None,
        captured_at=now,
    )
    session.add(row)
    await session.flush()
    merged = stacks.merged_text(groups)
    said = judgment.sentence if judgment else (merged or "no stack")
    await audit.record(
        session,
        component="controller",
        event_type="stack.captured",
        level="INFO" if taken.status == "CAPTURED" else "WARNING",
        message=f"attempt {attempt.slurm_job_id}/{attempt.attempt_index}: stacks {taken.status} "
        f"in {taken.duration_ms / 1000:.1f} s: {said}",
        payload={
            "captureId": row.id,
            "status": taken.status,
            "command": taken.command,
            "durationMs": taken.duration_ms,
            "bytes": taken.bytes,
            "nodesAsked": list(taken.nodes_asked),
            "nodesAnswered": list(taken.nodes_answered),
            "merged": merged,
            "judgment": row.judgment,
            "problems": row.problems,
            "mode": mode,
        },
        cluster=attempt.cluster,
        slurm_job_id=attempt.slurm_job_id,
        attempt_index=attempt.attempt_index,
        workflow_id=attempt.workflow_id,
        produced_at=now,
    )
    return row


async def _record_judgment(
    session: AsyncSession, attempt: Attempt, judgment: stacks.Judgment, trigger_anomaly_id: int | None
) -> Anomaly | None:
    blamed = (
        [{"node": judgment.node, "provenance": stacks.PROVENANCE, "detail": f"rank {judgment.rank}: {judgment.why}"}]
        if judgment.blame_node
        else None
    )
    return await record_anomaly(
        session,
        attempt=attempt,
        kind=STACK,
        category=CATEGORY,
        detector=DETECTOR,
        event_key=derived_key("stack", attempt.id),
        message=judgment.sentence,
        node=judgment.node if judgment.blame_node else None,
        line=f"rank {judgment.rank} on {judgment.node}: {judgment.where} ({judgment.why})",
        details={**judgment.to_json(), "triggerAnomalyId": trigger_anomaly_id},
        outlook=judgment.outlook,
        blamed_nodes=blamed,
    )
