"""Observer: one bulk `squeue --json` per tick turned into jobs and attempts (SPEC §3, §4.1)."""

from __future__ import annotations

import datetime as dt
import gc
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.audit import service as audit
from app.domain.admission.mode import ENROLLED, Admission, Requested, admission, effective_mode
from app.domain.admission.policy import parse_comment
from app.domain.control import states
from app.domain.control.identity import SubmissionFingerprint, job_id_reuse_reason
from app.domain.control.planner import JobObservation, slurm_expedited_hold
from app.infra import metrics
from app.infra.config import Settings
from app.infra.context import AppContext
from app.infra.db import Session, utcnow
from app.jobs import queries as job_queries
from app.jobs import service as jobs
from app.slurm import accounting_window
from app.slurm.adapter import Scheduler
from app.slurm.errors import SchedulerError, require_observation
from app.slurm.records import AccountingRecord, SlurmJob, Snapshot
from worker.service import Service

if TYPE_CHECKING:  # row types for annotations only: the SQL lives in the areas' queries
    from app.jobs.models import Attempt, Job

log = logging.getLogger("recovery.observer")

_CANDIDATE_MARKERS = ("aps", "heimdall")
# Jobs known before the cyclic GC is told to leave the long-lived objects alone (gc.freeze), and again
# each time their number doubles: otherwise every full collection walks all of them, in every tick.
_FREEZE_AT = 1000


def _may_enrol(comment: str) -> bool:
    """Cheap pre-check before JSON parsing: only comments mentioning APS/HEIMDALL can enrol."""
    lowered = comment.lower()
    return any(marker in lowered for marker in _CANDIDATE_MARKERS)


def attempt_values(job: SlurmJob) -> dict[str, Any]:
    """The attempt fields Slurm reports for the job's current execution."""
    return {
        "state": job.state,
        "state_reason": job.state_reason,
        "exit_code": job.exit_code if job.end_time or job.state in states.ENDED else None,
        "exit_signal": job.exit_signal or None,
        "nodes": list(job.nodes),
        "requeue_eligible": job.requeue,
        "held": job.held,
        "excluded_nodes": list(job.excluded_nodes),
        "tasks_per_node": job.tasks_per_node,
        "start_time": job.start_time,
        "end_time": job.end_time,
    }


@dataclass
class _Missing:
    """A tracked job that left squeue: when we first noticed, and whether accounting was asked."""

    since: float
    asked_accounting: bool = False


@dataclass
class ObserverState:
    """In-memory cache that makes an unchanged snapshot cost only a comparison per job."""

    seen: dict[int, SlurmJob] = field(default_factory=dict)
    ignored: set[int] = field(default_factory=set)
    missing: dict[int, _Missing] = field(default_factory=dict)
    unreachable_since: float | None = None
    # When our previous complete look at Slurm was taken (None before the first): an attempt first seen
    # already ended counts as observed only when it ended after that look (app/domain/admission/adoption.py).
    watching_since: dt.datetime | None = None


class Observer(Service):
    """Registers enrolled jobs, creates attempts as restart counts move, records their state."""

    name = "observer"

    def __init__(self, ctx: AppContext, scheduler: Scheduler, *, on_change: Callable[[], None] | None = None) -> None:
        super().__init__(interval=ctx.settings.poll_interval)
        self.ctx = ctx
        self.settings: Settings = ctx.settings
        self.scheduler = scheduler
        self.on_change = on_change
        self.state = ObserverState()
        self.last_tick_seconds = 0.0
        self._freeze_at = _FREEZE_AT

    async def tick(self) -> None:
        taken_at = utcnow()
        try:
            # an answer with Slurm's own errors is an outage too (22.05 exits 0 then), never "no jobs"
            snapshot = require_observation(await self.scheduler.list_jobs())
        except SchedulerError as exc:
            await self._scheduler_unreachable(exc)
            raise
        await self._scheduler_reachable()
        started = time.perf_counter()
        # A tick allocates many objects that hold no cycles (or only until the session closes): the cyclic
        # GC would walk every live object again and again meanwhile (as in app.slurm.parse: paused).
        paused = gc.isenabled()
        if paused:
            gc.disable()
        try:
            changed = await self.apply(snapshot, taken_at=taken_at)
            known = len(self.state.seen) + len(self.state.ignored)
            if known >= self._freeze_at:
                # what is alive now (jobs, parsed records) lives long: collect this tick's garbage (all of it
                # young, the GC was paused), then leave the survivors out of every later collection
                self._freeze_at = 2 * known
                gc.collect(0)
                gc.freeze()
        finally:
            if paused:
                gc.enable()
        self.last_tick_seconds = time.perf_counter() - started
        metrics.OBSERVER_TICK_SECONDS.observe(self.last_tick_seconds)
        metrics.OBSERVER_JOBS_SEEN.set(len(snapshot.jobs))
        if changed and self.on_change:
            self.on_change()

    async def apply(self, snapshot: Snapshot, *, taken_at: dt.datetime | None = None) -> int:
        """Apply one snapshot; returns how many jobs needed database work."""
        work = await self._apply(snapshot)
        if not any(problem.startswith("slurm reported") for problem in snapshot.problems):
            self.state.watching_since = taken_at or utcnow()
        return work

    async def _apply(self, snapshot: Snapshot) -> int:
        seen, ignored = self.state.seen, self.state.ignored
        changed: list[SlurmJob] = []
        for job in snapshot.jobs:
            previous = seen.get(job.job_id)
            # a parser that remembers the previous answer hands back the same object for an unchanged record
            if previous is not job and job.job_id not in ignored and previous != job:
                changed.append(job)
        for problem in snapshot.problems:
            log.warning("squeue record skipped: %s", problem)
        present = snapshot.by_id
        # An answer carrying Slurm's own errors may be partial: absence from it proves nothing.
        complete = not any(problem.startswith("slurm reported") for problem in snapshot.problems)
        gone = [job_id for job_id in seen if job_id not in present] if complete else []
        if not changed and not gone and not self.state.missing:
            return 0
        work = 0
        if changed:
            # One transaction; audit events, feed entries and workflow summaries go out in a few statements at
            # its end, whatever the number of jobs (so no workflow row is loaded).
            async with (
                self.ctx.sessions() as session,
                session.begin(),
                audit.batched(session),
                jobs.summaries_batched(session),
            ):
                records = await job_queries.current_jobs(
                    session, cluster=self.settings.cluster, slurm_job_ids=[j.job_id for j in changed]
                )
                new: list[SlurmJob] = []
                known: list[tuple[SlurmJob, Job]] = []
                for job in changed:
                    record = records.get(job.job_id)
                    if record is not None:
                        known.append((job, record))
                    elif _may_enrol(job.comment or ""):
                        new.append(job)
                    else:
                        ignored.add(job.job_id)
                # New jobs first, in bulk: the known jobs' workflows are loaded after their summaries moved.
                work += await self._register_new(session, new)
                if known:
                    latest = await job_queries.latest_attempts_of_jobs(session, job_ids=[r.id for _, r in known])
                    for job, record in known:
                        work += 1
                        await self._observe(session, job, record, latest.get(record.id))
            for job in changed:
                if job.job_id not in ignored:
                    seen[job.job_id] = job
                self.state.missing.pop(job.job_id, None)
        for job_id in gone:
            self.state.missing.setdefault(job_id, _Missing(since=time.monotonic()))
            seen.pop(job_id, None)
        if self.state.missing:
            work += await self._follow_missing()
        return work

    async def _register_new(self, session: Session, new: list[SlurmJob]) -> int:
        """First sightings: every registration and first attempt of the tick in a few multi-row statements."""
        if not new:
            return 0
        incarnations = await job_queries.next_incarnations(
            session, cluster=self.settings.cluster, slurm_job_ids=[job.job_id for job in new]
        )
        items: list[tuple[jobs.JobRegistration, jobs.NewAttempt | None]] = []
        for job in new:
            registration = self._registration(job, incarnation=incarnations.get(job.job_id, 0))
            if registration is None:
                continue
            first = None
            if registration.enrolment == ENROLLED:
                values = attempt_values(job)
                state = values.pop("state")
                values.update(self._paths_for(job, registration, latest_index=job.restart_count, previous=None))
                first = jobs.NewAttempt(attempt_index=job.restart_count, state=state, values=values)
            items.append((registration, first))
        if self.settings.fast_paths:
            await jobs.register_jobs(session, items=items, watching_since=self.state.watching_since)
            return len(new)
        for registration, first in items:  # RECOVERY_FAST_PATHS=off: the same rows, one job at a time
            record = await jobs.register_job(session, registration=registration)
            if first is not None:
                await jobs.create_attempt(
                    session,
                    job=record,
                    attempt_index=first.attempt_index,
                    state=first.state,
                    check_adoption=True,
                    watching_since=self.state.watching_since,
                    **first.values,
                )
        return len(new)

    async def _observe(self, session: Session, job: SlurmJob, record: Job, latest: Attempt | None) -> None:
        reason = job_id_reuse_reason(
            SubmissionFingerprint(record.submit_time, record.name, record.comment, record.restart_count),
            SubmissionFingerprint(job.submit_time, job.name, job.comment, job.restart_count),
        )
        if reason:
            await jobs.retire_job(session, job=record, reason=reason)
            registration = self._registration(job, incarnation=record.incarnation + 1)
            if registration is None:
                return
            record = await jobs.register_job(session, registration=registration)
            latest = None
        if record.enrolment != ENROLLED:
            await jobs.note_seen_again(session, job=record, at=utcnow())
            return
        await jobs.set_array_task(session, job=record, array_job_id=job.array_job_id, array_task_id=job.array_task_id)
        await jobs.update_from_squeue(
            session,
            job=record,
            submit_time=job.submit_time,
            restart_count=job.restart_count,
            requeue_eligible=job.requeue,
            user_id=job.user_id,
            group_id=job.group_id,
        )
        await self._track_attempts(session, job, record, latest)

    def _registration(self, job: SlurmJob, *, incarnation: int) -> jobs.JobRegistration | None:
        """What to record of a first sighting (None: no APS/HEIMDALL attempt at all, the job is ignored)."""
        result = parse_comment(job.comment)
        managed = self.settings.partition_managed(job.partition)
        decision = admission(result, environment=self.settings.environment, partition_managed=managed)
        if not result.is_attempt:
            self.state.ignored.add(job.job_id)
            return None
        policy = result.policy if result.valid else None
        if job.het_job_id is not None and decision.status == ENROLLED:
            decision = Admission(
                jobs.HETEROGENEOUS_JOB,
                f"heterogeneous job {job.het_job_id}+{job.het_job_offset or 0}: its components share one "
                "allocation and Slurm requeues or holds them only together, so Recovery does not act on it "
                "(submit the components as separate jobs to have them recovered)",
            )
        requested = policy.mode if policy else None
        mode = effective_mode(Requested(requested, job.partition), self.settings)  # stored: the mode at registration
        return jobs.JobRegistration(
            cluster=self.settings.cluster,
            slurm_job_id=job.job_id,
            environment=self.settings.environment,
            enrolment=decision.status,
            enrolment_reason=decision.reason,
            workflow_key=policy.workflow_id if policy else None,
            name=job.name,
            user=job.user,
            user_id=job.user_id,
            group_id=job.group_id,
            partition=job.partition,
            submit_time=job.submit_time,
            comment=job.comment,
            requested_mode=requested,
            registered_mode=mode.mode,
            mode_reason=mode.reason,
            requeue_eligible=job.requeue,
            state=job.state,
            restart_count=job.restart_count,
            incarnation=incarnation,
            policy_wrapper=result.wrapper,
            policy_valid=result.valid,
            policy_effective=result.policy.to_dict() if result.policy else None,
            policy_warnings=[w.to_dict() for w in result.warnings],
            policy_errors=[e.to_dict() for e in result.errors],
            shared_log_paths=policy.log_file_paths_shared_across_attempts if policy else False,
            array_job_id=job.array_job_id,
            array_task_id=job.array_task_id,
        )

    async def _track_attempts(self, session: Session, job: SlurmJob, record: Job, latest: Attempt | None) -> None:
        index = job.restart_count
        values = attempt_values(job)
        if latest is not None and latest.attempt_index > index:
            log.warning(
                "job %s: restart count %s is below recorded attempt %s; ignoring",
                job.job_id,
                index,
                latest.attempt_index,
            )
            return
        if latest is not None and latest.attempt_index == index:
            values.update(self._paths_for(job, record, latest_index=index, previous=None))
            await jobs.update_attempt(session, attempt=latest, job=record, check_adoption=True, **values)
            return
        if latest is not None:
            await self._close_previous(session, latest, record, job)
        previous = latest
        paths = self._paths_for(job, record, latest_index=index, previous=previous)
        await jobs.create_attempt(
            session,
            job=record,
            attempt_index=index,
            check_adoption=True,
            watching_since=self.state.watching_since,
            **values,
            **paths,
        )
        if previous is not None and previous.attempt_index < index - 1:
            await audit.record(
                session,
                component="job_manager",
                event_type="attempt.gap",
                level="WARNING",
                message=f"job {job.job_id} restarted {index - previous.attempt_index} times between "
                f"observations; attempts {previous.attempt_index + 1}..{index - 1} were not seen",
                cluster=record.cluster,
                slurm_job_id=job.job_id,
                attempt_index=index,
                workflow_id=record.workflow_id,
            )

    def _paths_for(
        self, job: SlurmJob, record: Job | jobs.JobRegistration, *, latest_index: int, previous: Attempt | None
    ) -> dict[str, Any]:
        """Log paths for the attempt; a path the previous attempt used is stale unless paths are shared."""
        paths = {"stdout_path": job.stdout, "stderr_path": job.stderr}
        if previous is None or record.shared_log_paths:
            return paths
        stale = {previous.stdout_path, previous.stderr_path} - {None}
        return {name: (None if value in stale else value) for name, value in paths.items()}

    async def _close_previous(self, session: Session, attempt: Attempt, record: Job, job: SlurmJob) -> None:
        """The restart count moved: the previous attempt has ended (it keeps its own record).

        When we never saw it end (the requeue came between two ticks), accounting knows how it ended
        (e.g. FAILED with exit code 1 before our requeue-hold); only without accounting is it REQUEUED.
        An expedited job (25.11+) whose next attempt Slurm holds itself failed by itself: FAILED, so it is decided.
        """
        if attempt.state in states.ENDED:
            if attempt.end_time is None:
                await jobs.update_attempt(session, attempt=attempt, job=record, end_time=utcnow())
            return
        final = await self._final_record(record, attempt)
        if (final is None or final.state in ("REQUEUED", "PENDING")) and _expedited_hold(job, attempt.attempt_index):
            # "holding expedited requeue ... as no epilogs failed": no node failure made this requeue, the job's
            # own failure did (accounting says REQUEUED), and Slurm leaves the next attempt held for good
            exit_code = final.exit_code if final is not None and final.exit_code is not None else job.exit_code
            await jobs.update_attempt(
                session,
                attempt=attempt,
                job=record,
                state="FAILED",
                exit_code=exit_code if exit_code is not None else attempt.exit_code,
                end_time=(final.end if final is not None else None) or attempt.end_time or utcnow(),
                ended_reason="failed by itself: Slurm requeue-held its expedited requeue (--requeue=expedite "
                "restarts at once only after a node failure or a failed epilog)",
            )
            return
        if final is not None and final.state not in ("REQUEUED", "PENDING"):
            await jobs.update_attempt(
                session,
                attempt=attempt,
                job=record,
                state=final.state,
                exit_code=final.exit_code if final.exit_code is not None else attempt.exit_code,
                exit_signal=final.exit_signal or attempt.exit_signal,
                end_time=final.end or attempt.end_time or utcnow(),
                ended_reason=(
                    f"ended between two looks (it was seen {attempt.state.lower()}); final state from "
                    f"Slurm accounting ({final.source}), then Slurm started the next attempt"
                    if attempt.start_time is not None or attempt.state in states.EXECUTING
                    else f"ended before Recovery saw it run; final state from Slurm accounting ({final.source}), "
                    "then Slurm started the next attempt"
                ),
            )
            return
        await jobs.update_attempt(
            session,
            attempt=attempt,
            job=record,
            state="REQUEUED",
            end_time=attempt.end_time or utcnow(),
            ended_reason="requeued by Slurm: a new attempt of the job started, and accounting does not say "
            "how this one ended",
        )

    async def _follow_missing(self) -> int:
        """Jobs that left squeue: ask accounting once, else UNKNOWN after the grace period (never FAILED)."""
        now = time.monotonic()
        grace = self.settings.unknown_grace_seconds
        done: list[int] = []
        work = 0
        for job_id, missing in list(self.state.missing.items()):
            async with self.ctx.sessions() as session, session.begin():
                record = (
                    await job_queries.current_jobs(session, cluster=self.settings.cluster, slurm_job_ids=[job_id])
                ).get(job_id)
                attempt = await job_queries.latest_attempt(session, job_id=record.id) if record else None
                if attempt is None or attempt.state in states.ENDED:
                    done.append(job_id)
                    continue
                if not missing.asked_accounting:
                    missing.asked_accounting = True
                    final = await self._final_record(record, attempt) if record else None
                    if final is not None:
                        await jobs.update_attempt(
                            session,
                            attempt=attempt,
                            job=record,
                            state=final.state,
                            exit_code=final.exit_code,
                            exit_signal=final.exit_signal,
                            end_time=final.end or utcnow(),
                            ended_reason=f"left squeue; final state from accounting ({final.source})",
                        )
                        work += 1
                        done.append(job_id)
                        continue
                if now - missing.since >= grace:
                    await jobs.update_attempt(
                        session,
                        attempt=attempt,
                        job=record,
                        state="UNKNOWN",
                        ended_reason=f"not listed by squeue for {grace:.0f} s and unknown to accounting",
                    )
                    work += 1
                    done.append(job_id)
        for job_id in done:
            self.state.missing.pop(job_id, None)
        return work

    async def _final_record(self, record: Job, attempt: Attempt) -> AccountingRecord | None:
        """Accounting's ended row of this attempt, matched within the attempt's own time window."""
        history = await self._history(record.slurm_job_id, comment=record.comment)
        if not history:
            return None
        return accounting_window.attempt_record(history, started=attempt.start_time, first_seen=attempt.created_at)

    async def _history(self, job_id: int, *, comment: str | None = None) -> list[AccountingRecord] | None:
        """This submission's attempts in accounting (None when it cannot be asked).

        Accounting keeps every job that ever had this id: after slurmctld lost its state (or its
        ids wrapped) `sacct -j ID` also lists earlier submissions' rows, oldest first. Rows whose
        stored comment (AccountingStoreFlags=job_comment) is not this job's belong to another
        submission and are dropped, so that attempt N means this job's attempt N.
        """
        try:
            history = await self.scheduler.job_history(job_id)
        except SchedulerError as exc:
            log.warning("accounting lookup for job %s failed: %s", job_id, exc)
            return None
        if history is None or not comment:
            return history
        return [record for record in history if not record.comment or record.comment == comment]

    async def _scheduler_unreachable(self, exc: SchedulerError) -> None:
        if self.state.unreachable_since is not None:
            return
        self.state.unreachable_since = time.monotonic()
        log.warning("Slurm is not answering (%s); nothing is marked failed, retrying with backoff", exc)
        try:
            async with self.ctx.sessions() as session, session.begin():
                await audit.record(
                    session,
                    component="observer",
                    event_type="scheduler.unreachable",
                    level="WARNING",
                    message=f"Slurm did not answer: {exc}"[:500],
                    cluster=self.settings.cluster,
                    payload={"error": type(exc).__name__},
                )
        except Exception:
            log.exception("could not record that Slurm is unreachable")

    async def _scheduler_reachable(self) -> None:
        if self.state.unreachable_since is None:
            return
        outage = time.monotonic() - self.state.unreachable_since
        self.state.unreachable_since = None
        async with self.ctx.sessions() as session, session.begin():
            await audit.record(
                session,
                component="observer",
                event_type="scheduler.reachable",
                message=f"Slurm answers again after {outage:.0f} s",
                cluster=self.settings.cluster,
                payload={"outageSeconds": round(outage, 1)},
            )


def _expedited_hold(job: SlurmJob, attempt_index: int) -> bool:
    """Slurm holds attempt `attempt_index` + 1 of an expedited job itself (it failed without a node failure)."""
    observation = JobObservation(
        state=job.state,
        restart_count=job.restart_count,
        held=job.held,
        state_reason=job.state_reason,
        state_description=job.state_description,
        priority=job.priority,
        expedited=job.expedited_requeue,
    )
    return slurm_expedited_hold(observation, attempt_index)
