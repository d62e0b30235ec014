"""Advisor: turns failed attempts (Slurm failure states, crash/hang/slowdown anomalies) into durable Advice (SPEC §6).

Work is found incrementally, never by scanning every attempt each tick:

* Slurm states arrive through the change feed (topic `attempt`, written by the job manager);
  the advisor keeps its feed position. An attempt in a failure state without Advice is a new
  failure; a state change of an attempt that already has Advice is folded into it (a clean
  COMPLETED after a crash line turns RESTART into TERMINATE).
* Anomalies (CRASH / NO_PROGRESS / SLOWDOWN rows written by the watcher) are read by id after
  the last one seen.
* At start-up (positions are kept in memory) one catch-up query finds what happened while no
  advisor ran: failed attempts with neither Advice nor an `advice.not_needed` event, attempts
  with active Advice, and anomalies of attempts that are still running or not yet decided.

Every signal about one attempt goes through the domain's `decide` and `merge_signals`, so one
failure gives one Advice whose generation moves only when the decision changes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, exists, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.advice import service as advice_service
from app.advice.models import Advice
from app.audit.models import AuditEvent
from app.config import Settings
from app.context import AppContext
from app.db import utcnow
from app.domain.advice import FAILURE_STATES, Failure, JobPolicy, SitePolicy, decide
from app.domain.mode import resolve_mode
from app.domain.retry import AttemptRecord, FailureKind
from app.evidence.models import Anomaly, Checkpoint
from app.feed import service as feed
from app.jobs.models import Attempt, Job, Policy
from app.jobs.service import ACTIVE_STATES, ENDED_STATES
from app.slurm.adapter import Scheduler
from app.slurm.errors import SchedulerError
from worker.service import Service

log = logging.getLogger("recovery.advisor")

ANOMALY_KINDS = ("CRASH", "NO_PROGRESS", "SLOWDOWN")
# An attempt that ended like this was not a failure: its final state speaks louder than a log line.
CLEAN_END_STATES = frozenset({"COMPLETED", "CANCELLED"})
BATCH = 500
# Partitions change rarely; a node list this old is still good enough to keep exclusions off a whole partition.
PARTITION_CACHE_SECONDS = 300.0
# After a failed lookup, decide without the guard for a while rather than wait on a struggling slurmctld per decision.
PARTITION_RETRY_SECONDS = 30.0


@dataclass(frozen=True)
class Signal:
    """One reason to (re)decide an attempt: its Slurm state, or one anomaly."""

    attempt_id: int
    anomaly_id: int | None = None

    @property
    def label(self) -> str:
        return f"anomaly:{self.anomaly_id}" if self.anomaly_id is not None else "scheduler_state"


def site_policy(settings: Settings) -> SitePolicy:
    """The operator's settings the decision reads."""
    return SitePolicy(
        max_requeue=settings.site_max_requeue,
        early_stop_failures=settings.early_stop_failures,
        straggler_enabled=settings.straggler_enabled,
        advice_ttl=settings.advice_ttl,
    )


def job_policy(effective: dict[str, Any] | None, *, requeue_eligible: bool | None) -> JobPolicy:
    """The parts of the job's effective APS policy the decision reads."""
    effective = effective or {}
    detection = effective.get("anomaly_detection_config") or {}
    max_requeue = effective.get("max_requeue_times")
    return JobPolicy(
        max_requeue_times=max_requeue if isinstance(max_requeue, int) and not isinstance(max_requeue, bool) else None,
        straggler_detection_enabled=detection.get("straggler_detection_enabled") is True,
        auto_resume_mode=str(effective.get("auto_resume_mode") or "requeue"),
        requeue_eligible=requeue_eligible,
    )


def anomaly_nodes(anomaly: Anomaly) -> set[str]:
    """Nodes an anomaly's evidence names (its node, or nodes listed in its details), never a whole allocation."""
    nodes: set[str] = set()
    if anomaly.node:
        nodes |= {part.strip() for part in anomaly.node.split(",") if part.strip()}
    details = anomaly.details or {}
    for key in ("nodes", "peer_nodes", "peers"):
        value = details.get(key)
        if isinstance(value, list):
            nodes |= {str(v).strip() for v in value if str(v).strip()}
    return nodes


class Advisor(Service):
    """Decides RESTART or TERMINATE for failed attempts and records it as Advice."""

    name = "advisor"
    needs_lease = True

    def __init__(
        self,
        ctx: AppContext,
        scheduler: Scheduler | None = None,
        *,
        on_change: Callable[[], None] | None = None,
        interval: float | None = None,
    ) -> None:
        super().__init__(interval=interval if interval is not None else max(1.0, ctx.settings.poll_interval))
        self.ctx = ctx
        self.scheduler = scheduler  # None: partitions unknown, so the partition guard cannot fire
        self.settings = ctx.settings
        self.on_change = on_change
        self.feed_position: int | None = None
        self.anomaly_position: int | None = None
        self.decisions = 0
        self._partitions: dict[str, tuple[float, tuple[str, ...] | None]] = {}  # name -> (valid until, nodes)

    # ------------------------------------------------------------ finding work

    async def tick(self) -> None:
        signals: list[Signal] = []
        if self.feed_position is None or self.anomaly_position is None:
            signals += await self._catch_up()
        signals += await self._new_signals()
        changed = 0
        for signal in _dedupe(signals):
            changed += await self.process(signal)
        if changed and self.on_change:
            self.on_change()

    async def _catch_up(self) -> list[Signal]:
        """Positions start at the newest feed entry / anomaly; one query finds what was missed before."""
        async with self.ctx.sessions() as session:
            self.feed_position = await feed.latest_id(session)
            self.anomaly_position = int(await session.scalar(select(func.max(Anomaly.id))) or 0)
            has_advice = exists().where(Advice.attempt_id == Attempt.id)
            not_needed = exists().where(
                AuditEvent.slurm_job_id == Attempt.slurm_job_id,
                AuditEvent.attempt_index == Attempt.attempt_index,
                AuditEvent.event_type == "advice.not_needed",
                AuditEvent.cluster == Attempt.cluster,
            )
            active_advice = exists().where(Advice.attempt_id == Attempt.id, Advice.active.is_(True))
            enrolled = and_(
                Job.id == Attempt.job_id,
                Job.enrolment == "ENROLLED",
                Job.retired_at.is_(None),
                Job.cluster == self.settings.cluster,
            )
            failed = (
                select(Attempt.id)
                .join(Job, enrolled)
                .where(or_(and_(Attempt.state.in_(FAILURE_STATES), ~has_advice, ~not_needed), active_advice))
            )
            attempt_ids = (await session.scalars(failed)).all()
            undecided = (
                select(Anomaly.id, Anomaly.attempt_id)
                .join(Attempt, Attempt.id == Anomaly.attempt_id)
                .join(Job, enrolled)
                .where(
                    Anomaly.kind.in_(ANOMALY_KINDS),
                    or_(Attempt.state.in_(ACTIVE_STATES), active_advice, and_(~has_advice, ~not_needed)),
                )
                .order_by(Anomaly.id)
            )
            anomalies = (await session.execute(undecided)).all()
        # Anomalies first: a crash line usually precedes the state it causes, and its reason says more.
        signals = [Signal(attempt_id, anomaly_id) for anomaly_id, attempt_id in anomalies]
        signals += [Signal(attempt_id) for attempt_id in attempt_ids]
        if signals:
            log.info("advisor catch-up: %d attempt(s) and %d anomaly(ies) to decide", len(attempt_ids), len(anomalies))
        return signals

    async def _new_signals(self) -> list[Signal]:
        """Attempt state changes from the feed and anomalies after the last seen id."""
        assert self.feed_position is not None and self.anomaly_position is not None
        signals: list[Signal] = []
        async with self.ctx.sessions() as session:
            entries = await feed.read_since(session, after_id=self.feed_position, topics=["attempt"], limit=BATCH * 4)
            if entries:
                self.feed_position = entries[-1].id
            ended = {
                e.entity_id
                for e in entries
                if e.entity_id is not None and (e.payload or {}).get("state") in ENDED_STATES
            }
            if ended:
                rows = (
                    await session.execute(
                        select(Attempt.id, Attempt.state, Advice.id)
                        .outerjoin(Advice, Advice.attempt_id == Attempt.id)
                        .where(Attempt.id.in_(list(ended)))
                    )
                ).all()
                # A failure state starts a decision; any end of an attempt that has Advice is folded into it.
                signals += [
                    Signal(attempt_id)
                    for attempt_id, state, advice_id in rows
                    if state in FAILURE_STATES or advice_id is not None
                ]
            anomalies = (
                await session.execute(
                    select(Anomaly.id, Anomaly.attempt_id, Anomaly.kind)
                    .where(Anomaly.id > self.anomaly_position)
                    .order_by(Anomaly.id)
                    .limit(BATCH)
                )
            ).all()
            if anomalies:
                self.anomaly_position = anomalies[-1][0]
            signals += [
                Signal(attempt_id, anomaly_id) for anomaly_id, attempt_id, kind in anomalies if kind in ANOMALY_KINDS
            ]
        return signals

    # ------------------------------------------------------------ deciding

    async def process(self, signal: Signal) -> int:
        """Decide one signal in its own transaction; returns 1 when an Advice was created or changed."""
        async with self.ctx.sessions() as session, session.begin():
            attempt = await session.get(Attempt, signal.attempt_id)
            if attempt is None:
                return 0
            job = await session.get(Job, attempt.job_id)
            if (
                job is None
                or job.enrolment != "ENROLLED"
                or job.retired_at is not None
                or job.cluster != self.settings.cluster
            ):
                return 0
            anomaly = await session.get(Anomaly, signal.anomaly_id) if signal.anomaly_id is not None else None
            failure = await self._failure(session, attempt, anomaly)
            if failure is None:
                return 0
            policy = await session.scalar(select(Policy).where(Policy.job_id == job.id))
            history = await self._history(session, job, attempt)
            partition_nodes = await self.partition_nodes(job.partition)
            now = utcnow()
            decision = decide(
                failure=failure,
                policy=job_policy(
                    policy.effective if policy else None,
                    requeue_eligible=job.requeue_eligible
                    if job.requeue_eligible is not None
                    else attempt.requeue_eligible,
                ),
                site=site_policy(self.settings),
                history=history,
                partition_nodes=partition_nodes,
                now=now,
            )
            # Re-resolved with the current settings, so a changed ceiling or allowlist takes effect.
            mode = resolve_mode(
                requested=job.requested_mode,
                acknowledged=self.settings.acknowledge_scheduler_actions,
                partition_managed=self.settings.partition_managed(job.partition),
            )
            outcome = await advice_service.record_decision(
                session,
                attempt=attempt,
                decision=decision,
                mode=mode,
                signal=signal.label,
                evidence_refs=failure.evidence_refs,
                partition_nodes=partition_nodes,
                now=now,
            )
            self.decisions += 1
            return 1 if outcome.changed else 0

    async def partition_nodes(self, partition: str | None) -> tuple[str, ...] | None:
        """The partition's nodes for the exclusion guard, cached; None (no guard) when unknown or Slurm fails."""
        if not partition or self.scheduler is None:
            return None
        cached = self._partitions.get(partition)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        try:
            nodes = await self.scheduler.partition_nodes(partition)
        except Exception as exc:  # noqa: BLE001 - whatever went wrong, a decision is never blocked by this lookup
            kind = "Slurm failed" if isinstance(exc, SchedulerError) else type(exc).__name__
            log.warning(
                "advisor: nodes of partition %r unknown (%s: %s); deciding without the partition guard",
                partition,
                kind,
                exc,
            )
            self._partitions[partition] = (time.monotonic() + PARTITION_RETRY_SECONDS, None)
            return None
        if nodes is None:
            log.info("advisor: Slurm lists no node in partition %r; deciding without the partition guard", partition)
        self._partitions[partition] = (time.monotonic() + PARTITION_CACHE_SECONDS, nodes)
        return nodes

    async def _failure(self, session: AsyncSession, attempt: Attempt, anomaly: Anomaly | None) -> Failure | None:
        """The domain's Failure for this signal, with the attempt's checkpoints and the nodes its evidence names."""
        anomalies = (
            await session.scalars(select(Anomaly).where(Anomaly.attempt_id == attempt.id).order_by(Anomaly.id))
        ).all()
        named: set[str] = set()
        for row in anomalies:
            if anomaly is None or row.id <= anomaly.id:
                named |= anomaly_nodes(row)
        saved, iteration = (await _checkpoint_summary(session, [attempt.id])).get(attempt.id, (0, None))
        state = attempt.state
        use_state = anomaly is None or state in CLEAN_END_STATES or (anomaly.kind == "SLOWDOWN" and state != "RUNNING")
        if use_state:
            if state in ACTIVE_STATES:
                return None  # a state signal for a live attempt: nothing has happened yet
            if state == "NODE_FAIL" and len(attempt.nodes or ()) == 1:
                named |= set(attempt.nodes)  # the one node it ran on is the node that failed
            refs = [f"attempt_state:{attempt.id}:{state}"] + ([f"anomaly:{anomaly.id}"] if anomaly is not None else [])
            return Failure(
                attempt_index=attempt.attempt_index,
                kind=FailureKind.SCHEDULER_FAILURE,
                state=state,
                exit_code=attempt.exit_code,
                implicated_nodes=tuple(sorted(named)),
                evidence_refs=tuple(refs),
                attempt_running=False,
                checkpoints_saved=saved,
                latest_checkpoint_iteration=iteration,
            )
        return Failure(
            attempt_index=attempt.attempt_index,
            kind=FailureKind(anomaly.kind),
            category=anomaly.category,
            implicated_nodes=tuple(sorted(named)),
            evidence_refs=(f"anomaly:{anomaly.id}",),
            attempt_running=state == "RUNNING",
            checkpoints_saved=saved,
            latest_checkpoint_iteration=iteration,
        )

    async def _history(self, session: AsyncSession, job: Job, attempt: Attempt) -> list[AttemptRecord]:
        """The job's attempts before this one, as the retry rules see them."""
        earlier = (
            await session.scalars(
                select(Attempt)
                .where(Attempt.job_id == job.id, Attempt.attempt_index < attempt.attempt_index)
                .order_by(Attempt.attempt_index)
            )
        ).all()
        if not earlier:
            return []
        ids = [a.id for a in earlier]
        checkpoints = await _checkpoint_summary(session, ids)
        nodes: dict[int, set[str]] = {}
        for row in (await session.scalars(select(Anomaly).where(Anomaly.attempt_id.in_(ids)))).all():
            nodes.setdefault(row.attempt_id, set()).update(anomaly_nodes(row))
        advice = {
            row.attempt_id: row
            for row in (await session.scalars(select(Advice).where(Advice.attempt_id.in_(ids)))).all()
        }
        records = []
        for a in earlier:
            saved, iteration = checkpoints.get(a.id, (0, None))
            prior = advice.get(a.id)
            records.append(
                AttemptRecord(
                    attempt_index=a.attempt_index,
                    failed=a.state in FAILURE_STATES or prior is not None,
                    checkpoints_saved=saved,
                    latest_checkpoint_iteration=iteration,
                    implicated_nodes=tuple(sorted(nodes.get(a.id, ()))),
                    advice_exclusions=tuple(prior.exclusions or ()) if prior else (),
                )
            )
        return records


async def _checkpoint_summary(session: AsyncSession, attempt_ids: Iterable[int]) -> dict[int, tuple[int, int | None]]:
    """Per attempt: how many checkpoint saves were recorded and the highest saved iteration."""
    ids = list(attempt_ids)
    if not ids:
        return {}
    rows = (
        await session.execute(
            select(Checkpoint.attempt_id, func.count(Checkpoint.id), func.max(Checkpoint.iteration))
            .where(Checkpoint.attempt_id.in_(ids), Checkpoint.kind == "saved")
            .group_by(Checkpoint.attempt_id)
        )
    ).all()
    return {
        attempt_id: (int(count), int(iteration) if iteration is not None else None)
        for attempt_id, count, iteration in rows
    }


def _dedupe(signals: list[Signal]) -> list[Signal]:
    seen: set[Signal] = set()
    out = []
    for signal in signals:
        if signal not in seen:
            seen.add(signal)
            out.append(signal)
    return out
