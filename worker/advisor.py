"""Advisor: turns failed attempts (Slurm failure states, crash/hang/slowdown anomalies) into durable Advice (SPEC §6).

Work is found incrementally, never by scanning every attempt each tick:

* Slurm states arrive through the change feed (topic `attempt`, written by the job manager);
  the advisor keeps its feed position. An attempt in a failure state without Advice is a new
  failure; a state change of an attempt that already has Advice is folded into it (a clean
  COMPLETED after a crash line turns RESTART into TERMINATE).
* Anomalies (CRASH / NO_PROGRESS / SLOWDOWN rows written by the watcher) are read by id after
  the last one seen.
* Both positions are stored (`worker_positions`) after the signals before them were decided, so a
  restart resumes where the last advisor stopped and an anomaly recorded while no advisor ran is
  still decided. Only a database without stored positions (new, or from before revision 0004) is
  caught up with one query: failed attempts with neither Advice nor an `advice.not_needed` event,
  attempts with active Advice, and anomalies of attempts that are still running or not yet decided.
* Adopted attempts (their end was not observed by this installation, app/domain/admission/adoption.py) are
  history: never decided.

Every signal about one attempt goes through the domain's `decide` and `merge_signals`, so one
failure gives one Advice whose generation moves only when the decision changes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from app.advice import queries as advice_queries
from app.advice import service as advice_service
from app.domain.admission.mode import ENROLLED, effective_mode
from app.domain.admission.policy import EffectivePolicy
from app.domain.control import states
from app.domain.control.singleton import MODE as SINGLETON
from app.domain.decision import rootcause
from app.domain.decision.advice import Failure, JobPolicy, SitePolicy, decide
from app.domain.decision.checkpoint_rules import CheckResult
from app.domain.decision.retry import AttemptRecord, FailureKind
from app.domain.detection.signatures import Classifier
from app.evidence import checkpoint_release as checkpoint_checks
from app.evidence import findings as diagnosis
from app.evidence import queries as evidence_queries
from app.evidence import service as evidence_service
from app.feed import queries as feed_queries
from app.fleet import service as fleet_service
from app.infra import metrics
from app.infra.config import Settings
from app.infra.context import AppContext
from app.infra.db import Session, utcnow
from app.infra.log_format import bind, log_context
from app.jobs import queries as job_queries
from app.leases import queries as lease_queries
from app.leases import service as leases
from app.slurm.adapter import Scheduler
from app.slurm.errors import SchedulerError
from worker.service import Service

if TYPE_CHECKING:  # row types for annotations only: the SQL lives in the areas' queries
    from app.evidence.models import Anomaly
    from app.jobs.models import Attempt, Job

log = logging.getLogger("recovery.advisor")

BATCH = 500
# Partitions change rarely; a node list this old is still good enough to keep exclusions off a whole partition.
PARTITION_CACHE_SECONDS = 300.0
# After a failed lookup, decide without the guard for a while rather than wait on a struggling slurmctld per decision.
PARTITION_RETRY_SECONDS = 30.0
# A host-less hardware line read before the observer saw where the attempt runs: wait this long for its node list.
ALLOCATION_WAIT_SECONDS = 30.0


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
        stop_repeated_application_failures=settings.stop_repeated_application_failures,
    )


def job_policy(effective: EffectivePolicy, *, requeue_eligible: bool | None) -> JobPolicy:
    """The parts of the job's effective APS policy the decision reads."""
    return JobPolicy(
        max_requeue_times=effective.max_requeue_times,
        straggler_detection_enabled=effective.anomaly_detection_config.straggler_detection_enabled,
        auto_resume_mode=effective.auto_resume_mode,
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
        self._stored_feed: int | None = None
        self._stored_anomaly: int | None = None
        self.decisions = 0
        self._partitions: dict[str, tuple[float, tuple[str, ...] | None]] = {}  # name -> (valid until, nodes)
        self.classifier = _classifier(ctx.settings)  # reads the iteration out of an attempt's last progress line
        self._awaiting_nodes: dict[Signal, float] = {}  # signal -> when it first waited for the attempt's nodes
        self._awaiting_origin: dict[Signal, float] = {}  # signal -> when it first waited for the failure's origin

    # ------------------------------------------------------------ finding work

    async def tick(self) -> None:
        signals: list[Signal] = []
        if self.feed_position is None or self.anomaly_position is None:
            signals += await self._resume()
        new, feed_to, anomaly_to = await self._new_signals()
        signals += new
        signals = list(self._awaiting_nodes) + list(self._awaiting_origin) + signals
        changed = 0
        for signal in _dedupe(signals):
            with log_context():
                changed += await self.process(signal)
        # Positions move (and are stored) only once everything before them was decided: a crash or a
        # database outage mid-batch re-reads the batch, and deciding a signal twice changes nothing.
        await self._store_positions(feed_to, anomaly_to)
        if changed and self.on_change:
            self.on_change()

    @property
    def _position_names(self) -> tuple[str, str]:
        cluster = self.settings.cluster
        return f"advisor:{cluster}:feed", f"advisor:{cluster}:anomaly"

    async def _resume(self) -> list[Signal]:
        """Continue from the stored positions; without them (a new database), catch up with one query."""
        feed_name, anomaly_name = self._position_names
        async with self.ctx.sessions() as session:
            stored = await lease_queries.load_positions(session, names=self._position_names)
        if feed_name in stored and anomaly_name in stored:
            self.feed_position, self.anomaly_position = stored[feed_name], stored[anomaly_name]
            log.info("advisor resumes after change-feed entry %s and anomaly %s", *stored.values())
            return []
        signals = await self._catch_up()
        await self._store_positions(self.feed_position, self.anomaly_position)
        return signals

    async def _store_positions(self, feed_to: int | None, anomaly_to: int | None) -> None:
        if feed_to is None or anomaly_to is None:
            return
        if (feed_to, anomaly_to) == (self._stored_feed, self._stored_anomaly):
            self.feed_position, self.anomaly_position = feed_to, anomaly_to
            return
        feed_name, anomaly_name = self._position_names
        async with self.ctx.sessions() as session, session.begin():
            await leases.save_positions(session, positions={feed_name: feed_to, anomaly_name: anomaly_to})
        self.feed_position, self.anomaly_position = feed_to, anomaly_to
        self._stored_feed, self._stored_anomaly = feed_to, anomaly_to

    async def _catch_up(self) -> list[Signal]:
        """Positions start at the newest feed entry / anomaly; one query finds what was missed before."""
        async with self.ctx.sessions() as session:
            self.feed_position = await feed_queries.latest_id(session)
            self.anomaly_position = await evidence_queries.latest_anomaly_id(session)
            missed = await advice_queries.undecided(session, cluster=self.settings.cluster)
        # Anomalies first: a crash line usually precedes the state it causes, and its reason says more.
        signals = [Signal(attempt_id, anomaly_id) for anomaly_id, attempt_id in missed.anomalies]
        signals += [Signal(attempt_id) for attempt_id in missed.attempt_ids]
        if signals:
            log.info(
                "advisor catch-up: %d attempt(s) and %d anomaly(ies) to decide",
                len(missed.attempt_ids),
                len(missed.anomalies),
            )
        return signals

    async def _new_signals(self) -> tuple[list[Signal], int, int]:
        """Attempt state changes from the feed and anomalies after the last seen id, and the positions after them."""
        assert self.feed_position is not None and self.anomaly_position is not None
        signals: list[Signal] = []
        feed_to, anomaly_to = self.feed_position, self.anomaly_position
        async with self.ctx.sessions() as session:
            entries = await feed_queries.read_since(
                session, after_id=self.feed_position, topics=["attempt"], limit=BATCH * 4
            )
            if entries:
                feed_to = entries[-1].id
            ended = {
                e.entity_id
                for e in entries
                if e.entity_id is not None and (e.payload or {}).get("state") in states.ENDED
            }
            if ended:
                rows = await advice_queries.advice_ids_of_attempts(session, attempt_ids=sorted(ended))
                # A failure state starts a decision; any end of an attempt that has Advice is folded into it.
                signals += [
                    Signal(attempt_id)
                    for attempt_id, state, advice_id in rows
                    if state in states.RETRYABLE_FAILED or advice_id is not None
                ]
            anomalies = await evidence_queries.anomalies_after(session, after_id=self.anomaly_position, limit=BATCH)
            if anomalies:
                anomaly_to = anomalies[-1][0]
            signals += [
                Signal(attempt_id, anomaly_id)
                for anomaly_id, attempt_id, kind in anomalies
                if kind in evidence_queries.DECIDED_KINDS or kind == evidence_queries.STACK
            ]
        return signals, feed_to, anomaly_to

    # ------------------------------------------------------------ deciding

    async def process(self, signal: Signal) -> int:
        """Decide one signal in its own transaction; returns 1 when an Advice was created or changed."""
        async with self.ctx.sessions() as session, session.begin():
            attempt = await job_queries.get_attempt(session, attempt_id=signal.attempt_id)
            if attempt is None or attempt.adopted_at is not None:
                return 0  # adopted: its end was not observed here, so it is history, never acted on
            bind(job_id=attempt.slurm_job_id, attempt_index=attempt.attempt_index)
            job = await job_queries.get_job(session, job_id=attempt.job_id)
            if (
                job is None
                or job.enrolment != ENROLLED
                or job.retired_at is not None
                or job.cluster != self.settings.cluster
            ):
                return 0
            anomaly = (
                await evidence_queries.get_anomaly(session, anomaly_id=signal.anomaly_id)
                if signal.anomaly_id is not None
                else None
            )
            stack_ref: list[str] = []
            if anomaly is not None and anomaly.kind == evidence_queries.STACK:
                # the stacks re-weigh the signal that made Recovery end the attempt; they are not a signal of their own
                stack_ref = [f"stacks:anomaly:{anomaly.id}"]
                trigger = (anomaly.details or {}).get("triggerAnomalyId")
                anomaly = (
                    await evidence_queries.get_anomaly(session, anomaly_id=trigger)
                    if isinstance(trigger, int)
                    else None
                )
            found = await self._failure(session, attempt, anomaly)
            if found is None:
                return 0
            failure, consequence_only = found
            if stack_ref:
                failure = replace(failure, evidence_refs=(*failure.evidence_refs, *stack_ref))
            if self._await_origin(signal, failure, consequence_only):
                return 0  # decided once the line naming the failed process is read, or the wait is over
            if self._await_allocation(signal, attempt, failure):
                return 0  # decided once the observer has recorded where the attempt runs
            check = await self._checkpoint_check(session, job, attempt)
            if check is not None and not check.loadable:  # a save that cannot be loaded is no new checkpoint
                failure = replace(failure, checkpoints_saved=0, latest_checkpoint_iteration=None)
            policy = await job_queries.policy_of_job(session, job_id=job.id)
            effective = EffectivePolicy.from_dict(policy.effective if policy else None)
            history = await self._history(session, job, attempt)
            if policy is not None and effective.auto_resume_mode == SINGLETON:
                chain = await self._chain(session, job)  # the twin is the next attempt of one run
                if chain:
                    history = chain + [replace(r, attempt_index=r.attempt_index + len(chain)) for r in history]
                    failure = replace(failure, attempt_index=failure.attempt_index + len(chain))
            partition_nodes = await self.partition_nodes(job.partition)
            now = utcnow()
            # Node reputation across jobs (app/fleet): this failure's hardware blame counts, suspects are excluded.
            suspects = await fleet_service.note_failure(
                session,
                settings=self.settings,
                job_id=job.id,
                attempt_id=attempt.id,
                slurm_job_id=attempt.slurm_job_id,
                failure=failure,
                now=now,
            )
            decision = decide(
                failure=failure,
                policy=job_policy(
                    effective,
                    requeue_eligible=job.requeue_eligible
                    if job.requeue_eligible is not None
                    else attempt.requeue_eligible,
                ),
                site=site_policy(self.settings),
                history=history,
                partition_nodes=partition_nodes,
                now=now,
                suspect_nodes=suspects,
            )
            # Re-resolved with the current settings, so a changed ceiling or allowlist takes effect.
            mode = effective_mode(job, self.settings)
            outcome = await advice_service.record_decision(
                session,
                attempt=attempt,
                decision=decision,
                mode=mode,
                signal=signal.label,
                evidence_refs=failure.evidence_refs,
                partition_nodes=partition_nodes,
                now=now,
                checkpoint_check=check.as_dict() if check is not None else None,
                anomaly_id=rootcause.decided_anomaly(failure.evidence_refs),
            )
            if outcome.advice is not None and failure.kind is FailureKind.CRASH:
                # A crash's root cause can sharpen as more lines arrive (the launcher's summary after a peer's
                # error): the Advice cites the newest root cause, never replacing a hang it was decided on.
                await advice_service.cite_root_cause(
                    session, advice=outcome.advice, anomaly_id=rootcause.decided_anomaly(failure.evidence_refs)
                )
            self.decisions += 1
            if outcome.changed:
                signalled = anomaly.detected_at if anomaly is not None else attempt.end_time
                latency = metrics.seconds_since(signalled, now)
                if latency is not None:
                    metrics.DECISION_LATENCY.labels(decision.operation.value).observe(latency)
            return 1 if outcome.changed else 0

    async def _checkpoint_check(self, session: Session, job: Job, attempt: Attempt) -> CheckResult | None:
        """The checkpoint check before release (RECOVERY_CHECKPOINT_CHECK_PARTITIONS), docs/checkpoint-checks.md."""
        if not checkpoint_checks.enabled_for(self.settings, job.partition):
            return None
        existing = await advice_queries.advice_for_attempt(session, attempt_id=attempt.id)
        previous = await advice_queries.previous_checkpoint_check(
            session, job_id=job.id, attempt_index=attempt.attempt_index
        )
        return await checkpoint_checks.check_newest_save(
            session,
            settings=self.settings,
            job=job,
            attempt=attempt,
            previous=previous,
            stored=existing.checkpoint_check if existing is not None else None,
        )

    def _await_origin(self, signal: Signal, failure: Failure, consequence_only: bool) -> bool:
        """True while every crash line read so far only reports another process's failure (a lost peer, the
        launcher's SIGTERM, srun's `Terminated`): that process's own report is on its way, and acting now would
        make everything it prints "after Recovery acted". Bounded by RECOVERY_ORIGIN_WAIT_SECONDS."""
        waiting = consequence_only
        if not waiting:
            self._awaiting_origin.pop(signal, None)
            return False
        since = self._awaiting_origin.setdefault(signal, time.monotonic())
        if time.monotonic() - since < self.settings.origin_wait_seconds:
            return True
        self._awaiting_origin.pop(signal, None)
        return False

    def _await_allocation(self, signal: Signal, attempt: Attempt, failure: Failure) -> bool:
        """True while an infrastructure crash blames nobody only because the attempt's nodes are not known yet."""
        waiting = (
            failure.kind is FailureKind.CRASH
            and failure.outlook == rootcause.INFRASTRUCTURE
            and not failure.implicated_nodes
            and not attempt.nodes
            and attempt.state in states.ACTIVE
        )
        if not waiting:
            self._awaiting_nodes.pop(signal, None)
            return False
        since = self._awaiting_nodes.setdefault(signal, time.monotonic())
        if time.monotonic() - since < ALLOCATION_WAIT_SECONDS:
            return True
        log.warning(
            "advisor: attempt %s has no node list after %.0f s; deciding without", attempt.id, ALLOCATION_WAIT_SECONDS
        )
        self._awaiting_nodes.pop(signal, None)
        return False

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

    async def _failure(
        self, session: Session, attempt: Attempt, anomaly: Anomaly | None
    ) -> tuple[Failure, bool] | None:
        """The domain's Failure for this signal (the attempt's root cause, checkpoints and the nodes evidence blames),
        and whether its root cause so far is only a known consequence of another process's failure."""
        anomalies = await evidence_queries.anomalies_of_attempts(session, attempt_ids=[attempt.id])
        # Every crash line recorded so far, not only those up to this signal's: the lines of one read arrive
        # together, and the survivor's peer error read first must not be decided on without the launcher's
        # summary that names the failed process.
        seen = list(anomalies)
        progress = await evidence_queries.progress_lines(session, attempt_ids=[attempt.id])
        cause = diagnosis.attempt_cause(
            seen,
            attempt_nodes=tuple(attempt.nodes or ()),
            tasks_per_node=attempt.tasks_per_node,
            progress_line=progress.get(attempt.id),
            classifier=self.classifier,
            job_dirs=diagnosis.job_dirs_of(attempt.stdout_path, attempt.stderr_path),
        )
        named: set[str] = set(cause.blamed)
        if cause.derived:
            await evidence_service.store_blame(session, blamed=cause.derived)
        if cause.primary_anomaly_id is not None:
            crash_ids = [row.id for row in seen if row.kind == "CRASH"]
            await evidence_service.store_roles(session, root_cause_id=cause.primary_anomaly_id, crash_ids=crash_ids)
            if cause.node is not None and cause.node_from is not None:
                await evidence_service.store_failed_node(
                    session, anomaly_id=cause.primary_anomaly_id, node=cause.node, provenance=cause.node_from
                )
        for row in seen:
            if row.kind not in (evidence_service.CRASH, evidence_queries.AFTER_RECOVERY_ACTED):
                named |= anomaly_nodes(row)
        stack_note = next((row.message for row in reversed(seen) if row.kind == evidence_queries.STACK), None)
        summary = await evidence_queries.checkpoint_summary(session, attempt_ids=[attempt.id])
        saved, iteration = summary.get(attempt.id, (0, None))
        state = attempt.state
        use_state = anomaly is None or state in states.CLEAN_END or (anomaly.kind == "SLOWDOWN" and state != "RUNNING")
        if use_state:
            if state in states.ACTIVE:
                return None  # a state signal for a live attempt: nothing has happened yet
            if state == "NODE_FAIL" and len(attempt.nodes or ()) == 1:
                named |= set(attempt.nodes)  # the one node it ran on is the node that failed
            refs = [f"attempt_state:{attempt.id}:{state}"] + ([f"anomaly:{anomaly.id}"] if anomaly is not None else [])
            if cause.primary_anomaly_id is not None and (anomaly is None or anomaly.kind == "CRASH"):
                refs.append(f"root_cause:anomaly:{cause.primary_anomaly_id}")
            scheduler_failure = Failure(
                attempt_index=attempt.attempt_index,
                kind=FailureKind.SCHEDULER_FAILURE,
                state=state,
                exit_code=attempt.exit_code,
                category=cause.category,
                implicated_nodes=tuple(sorted(named)),
                evidence_refs=tuple(refs),
                attempt_running=False,
                checkpoints_saved=saved,
                latest_checkpoint_iteration=iteration,
                outlook=cause.outlook,
                signature=cause.signature,
                iteration=cause.iteration,
                stack_note=stack_note,
            )
            return scheduler_failure, cause.consequence_only
        assert anomaly is not None  # use_state holds when there is no anomaly
        crash = anomaly.kind == "CRASH"
        refs = [f"anomaly:{anomaly.id}"]
        if crash and cause.primary_anomaly_id not in (None, anomaly.id):
            refs.append(f"root_cause:anomaly:{cause.primary_anomaly_id}")
        failure = Failure(
            attempt_index=attempt.attempt_index,
            kind=FailureKind(anomaly.kind),
            category=(cause.category or anomaly.category) if crash else anomaly.category,
            implicated_nodes=tuple(sorted(named)),
            evidence_refs=tuple(refs),
            attempt_running=state == "RUNNING",
            checkpoints_saved=saved,
            latest_checkpoint_iteration=iteration,
            outlook=cause.outlook if crash else None,
            signature=cause.signature if crash else None,
            iteration=cause.iteration if crash else None,
            stack_note=stack_note,
        )
        return failure, crash and cause.consequence_only

    async def _history(self, session: Session, job: Job, attempt: Attempt) -> list[AttemptRecord]:
        """The job's attempts before this one, as the retry rules see them."""
        return await self._records(session, job.id, attempt.attempt_index)

    async def _chain(self, session: Session, job: Job) -> list[AttemptRecord]:
        """singleton_dependency: every attempt of the jobs before this one in its twin chain, oldest first,
        indexed as one run (so the limits and exclusions carry over to the twin; app/domain/control/singleton.py)."""
        chain: list[list[AttemptRecord]] = []
        slurm_job_id, seen = job.slurm_job_id, {job.id}
        for _ in range(64):  # bounded: a chain longer than any retry limit is not followed further
            previous = await advice_queries.singleton_predecessor(
                session, cluster=job.cluster, slurm_job_id=slurm_job_id
            )
            if previous is None or previous in seen:
                break
            seen.add(previous)
            before = await job_queries.get_job(session, job_id=previous)
            if before is None:
                break
            chain.insert(0, await self._records(session, before.id, 1 << 30))
            slurm_job_id = before.slurm_job_id
        out: list[AttemptRecord] = []
        for records in chain:
            out += [replace(r, attempt_index=len(out) + i) for i, r in enumerate(records)]
        return out

    async def _records(self, session: Session, job_id: int, attempt_index: int) -> list[AttemptRecord]:
        """A job's attempts before ``attempt_index``, as the retry rules see them."""
        earlier = await job_queries.attempts_before(session, job_id=job_id, attempt_index=attempt_index)
        if not earlier:
            return []
        ids = [a.id for a in earlier]
        checkpoints = await evidence_queries.checkpoint_summary(session, attempt_ids=ids)
        nodes: dict[int, set[str]] = {}
        for row in await evidence_queries.anomalies_of_attempts(session, attempt_ids=ids):
            if row.kind not in (evidence_service.CRASH, evidence_queries.AFTER_RECOVERY_ACTED):
                nodes.setdefault(row.attempt_id, set()).update(anomaly_nodes(row))
        crashes = await evidence_queries.crash_anomalies(session, attempt_ids=ids)
        progress = await evidence_queries.progress_lines(session, attempt_ids=ids)
        advice = await advice_queries.advice_of_attempts(session, attempt_ids=ids)
        records = []
        for a in earlier:
            saved, iteration = checkpoints.get(a.id, (0, None))
            prior = advice.get(a.id)
            checked = CheckResult.from_dict(prior.checkpoint_check) if prior is not None else None
            if checked is not None and not checked.loadable:
                saved, iteration = 0, None  # its newest save was found missing or incomplete before release
            cause = diagnosis.attempt_cause(
                crashes.get(a.id, []),
                attempt_nodes=tuple(a.nodes or ()),
                tasks_per_node=a.tasks_per_node,
                progress_line=progress.get(a.id),
                classifier=self.classifier,
                job_dirs=diagnosis.job_dirs_of(a.stdout_path, a.stderr_path),
            )
            nodes.setdefault(a.id, set()).update(cause.blamed)
            records.append(
                AttemptRecord(
                    attempt_index=a.attempt_index,
                    failed=a.state in states.RETRYABLE_FAILED or prior is not None,
                    checkpoints_saved=saved,
                    latest_checkpoint_iteration=iteration,
                    implicated_nodes=tuple(sorted(nodes.get(a.id, ()))),
                    advice_exclusions=tuple(prior.exclusions or ()) if prior else (),
                    failure_category=cause.category,
                    failure_outlook=cause.outlook,
                    failure_signature=cause.signature,
                    failure_iteration=cause.iteration,
                )
            )
        return records


def _classifier(settings: Settings) -> Classifier | None:
    """The collector's rules (for progress-marker iterations); None when the signatures file cannot be read."""
    from worker.collector import load_ruleset

    try:
        return Classifier(load_ruleset(settings))
    except Exception:  # noqa: BLE001 - the collector reports a broken file; decisions go on without iterations
        log.warning("advisor: signatures file unreadable; failures are compared without their iteration")
        return None


def _dedupe(signals: list[Signal]) -> list[Signal]:
    seen: set[Signal] = set()
    out = []
    for signal in signals:
        if signal not in seen:
            seen.add(signal)
            out.append(signal)
    return out
