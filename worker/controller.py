"""Controller: makes Slurm carry out active Advice in act mode, and proves from a fresh look that it did (SPEC §6).

Each reconcile pass takes ONE bulk `list_jobs` and plans at most one command per due Advice
with `app.domain.control.planner.plan_next_step`; when a pass sent commands, another pass (a new
observation) follows at once, so every step is planned from a fresh observation.

Crash safety: a command's milestone is written STARTED (its own committed transaction) before
the command is sent and SUCCEEDED/FAILED after; the planner treats a STARTED intent as "may
have happened" and lets the observation decide, and an intent whose effect a later
observation shows is marked SUCCEEDED (`scheduler.confirmed`). Killing the process anywhere
therefore neither repeats nor loses a command (tests/worker/test_crash_safety.py proves it on
real Slurm).

Every command first passes the one gate (app.domain.decision.gate.may_send), whose answer is stored with
the action. When it says no because the job's mode NOW is observe (it asked for observe, the
operator's ceiling is off or its partition is not managed) or an operator vetoed it, nothing is
sent: the commands it would have sent are recorded once per generation as SHADOW actions, and the
Advice stays PENDING with reason NOT_AUTHORIZED (still active, looked at again every OBSERVE_RECHECK
seconds, so Slurm reaching the state by itself, the job ending or the Advice expiring still close
it). An Advice decided in observe mode is never carried out: once the mode is act, it is closed
ABANDONED / DECIDED_IN_OBSERVE ("decided in observe mode; not carried out").

`Controller.step_hook` is called right before each command is sent (its STARTED milestone committed) and right
after it returned (before SUCCEEDED is recorded); it is None here. The tests' fault injection
(tests/fault_worker.py: kill -9 or pause the worker at such a point) sets it; production code has none.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from app.advice import queries as advice_queries
from app.advice import service as advice_service
from app.domain.control import states
from app.domain.control.backoff import exponential
from app.domain.control.planner import (
    AdviceState,
    Disposition,
    DispositionReason,
    HoldKind,
    JobObservation,
    Step,
    StepKind,
    hold_kind,
    plan_next_step,
    shadow_plan,
)
from app.domain.decision.advice import Rule
from app.domain.decision.checkpoint_rules import release_block_reason
from app.domain.decision.gate import ActionKind, GateAnswer, GateQuestion, GateReason, may_send
from app.evidence import queries as evidence_queries
from app.evidence import service as evidence_service
from app.fleet import service as fleet_service
from app.infra.context import AppContext
from app.infra.db import Session, utcnow
from app.infra.log_format import bind, log_context
from app.jobs import queries as job_queries
from app.slurm.adapter import JobLookup, JobTarget, Scheduler, job_target
from app.slurm.errors import OperationDisabled, SchedulerError, require_observation
from app.slurm.records import CommandResult, SlurmJob, Snapshot
from worker import singleton, stack_capture
from worker.milestones import Sent, run_command
from worker.service import Service

if TYPE_CHECKING:  # row types for annotations only: the SQL lives in the areas' queries
    from app.advice.models import Advice, SchedulerAction
    from app.jobs.models import Job

log = logging.getLogger("recovery.controller")

MAX_PASSES_PER_TICK = 12  # a RESTART needs 3 commands; bounded so one tick cannot spin forever
DUE_BATCH = 200
BACKOFF_BASE = 1.0  # seconds; doubles per consecutive transient failure of one Advice
BACKOFF_MAX = 60.0
STACK_WEIGH_WAIT = 30.0  # seconds the controller waits for the advisor to weigh a node the stacks blame


def backoff_delay(failures: int | None) -> dt.timedelta:
    """How long an Advice waits after `failures` consecutive transient failures."""
    return dt.timedelta(seconds=exponential(failures or 0, base=BACKOFF_BASE, cap=BACKOFF_MAX))


def observation_of(job: SlurmJob) -> JobObservation:
    """The planner's view of one job from squeue --json."""
    return JobObservation(
        state=job.state,
        restart_count=job.restart_count,
        held=job.held,
        state_reason=job.state_reason,
        state_description=job.state_description,
        priority=job.priority,
        excluded_nodes=tuple(job.excluded_nodes),
        nodes=tuple(job.nodes),
        requeue_eligible=job.requeue,
        expedited=job.expedited_requeue,
    )


def advice_state(advice: Advice) -> AdviceState:
    """The Advice generation as the planner takes it."""
    return AdviceState(
        advice_id=advice.id,
        generation=advice.generation,
        operation=advice.operation,
        attempt_index=advice.attempt_index,
        exclusions=tuple(advice.exclusions or ()),
        expires_at=advice.expires_at,
        mode=advice.mode,
    )


def effect_observed(step: str, advice: AdviceState, obs: JobObservation | None) -> str | None:
    """Whether a fresh observation shows a command's effect; a sentence saying how, else None."""
    k = advice.attempt_index
    if step == StepKind.REQUEUE_HOLD.value:
        if obs is not None and obs.restart_count >= k + 1:
            return f"Slurm shows restart count {obs.restart_count} (attempt {k} was requeued)"
    elif step == StepKind.SET_EXCLUSIONS.value:
        if obs is not None and set(advice.exclusions) <= set(obs.excluded_nodes):
            return f"Slurm shows ExcNodeList={','.join(obs.excluded_nodes)}"
    elif step == StepKind.RELEASE.value:
        if obs is not None and obs.restart_count == k + 1 and hold_kind(obs) is HoldKind.NONE:
            return f"attempt {k + 1} is no longer held ({obs.state})"
    elif step == StepKind.CANCEL.value:
        if obs is None or obs.state.upper() in states.TERMINAL:
            return "the job has ended" if obs is not None else "Slurm no longer lists the job"
    return None


def command_target(
    slurm_job_id: int, seen: SlurmJob | None, recorded: tuple[int | None, int | None]
) -> JobTarget | None:
    """How to name the job in commands: `<array id>_<task id>` for an array task (never the bare id of an
    array's last task, which Slurm reads as the whole array); None for an array record that still
    stands for several pending tasks (no command can name just one of them)."""
    array_job_id, array_task_id = (seen.array_job_id, seen.array_task_id) if seen is not None else recorded
    if array_job_id and array_task_id is None:
        return None
    if not array_job_id:
        return slurm_job_id
    return job_target(slurm_job_id, array_job_id, array_task_id)


class Controller(Service):
    """Reconciles active Advice: requeue-hold, exclude, release (RESTART) or cancel (TERMINATE)."""

    name = "controller"
    # ("before" | "after", the step) around each command; None in production (see the module docstring)
    step_hook: Callable[[str, StepKind], None] | None = None

    def __init__(
        self,
        ctx: AppContext,
        scheduler: Scheduler,
        *,
        interval: float | None = None,
    ) -> None:
        super().__init__(interval=interval if interval is not None else max(0.5, ctx.settings.poll_interval))
        self.ctx = ctx
        self.settings = ctx.settings
        self.scheduler = scheduler
        # Set by the WorkerRunner: checks right before a command that the lease is still ours (fencing).
        self.fence: Callable[[], Awaitable[bool]] | None = None
        self.passes = 0
        self.commands = 0

    async def tick(self) -> None:
        for _ in range(MAX_PASSES_PER_TICK):
            if not await self.reconcile_pass():
                break

    # ------------------------------------------------------------ one pass

    async def due_advice(self, now: dt.datetime) -> list[int]:
        """Ids of active Advice on this cluster whose next look is due."""
        async with self.ctx.sessions() as session:
            return await advice_queries.due_advice_ids(
                session, cluster=self.settings.cluster, now=now, vetoed=advice_service.VETOED, limit=DUE_BATCH
            )

    async def reconcile_pass(self) -> int:
        """Observe Slurm once and take at most one step per due Advice; returns how many commands were sent."""
        now = utcnow()
        due = await self.due_advice(now)
        if not due:
            return 0
        self.passes += 1
        try:
            snapshot = require_observation(await self.scheduler.list_jobs())
        except SchedulerError as exc:
            log.warning("controller: Slurm did not answer (%s); %d Advice wait", exc, len(due))
            for advice_id in due:
                await self._backoff(advice_id, f"squeue: {exc}")
            return 0
        complete = not any(problem.startswith("slurm reported") for problem in snapshot.problems)
        sent = 0
        for advice_id in due:
            with log_context(advice_id=advice_id):
                sent += await self.reconcile_one(advice_id, snapshot, complete=complete)
        return sent

    async def _observe(
        self, advice: Advice, snapshot: Snapshot, complete: bool
    ) -> tuple[bool, JobObservation | None, str]:
        """(observed, observation, note): not observed means "could not tell" - never "gone"."""
        job = snapshot.get(advice.slurm_job_id)
        if job is not None:
            return True, observation_of(job), ""
        if not complete:
            return False, None, "squeue's answer carried errors and did not list the job"
        try:
            lookup: JobLookup = await self.scheduler.lookup_job(advice.slurm_job_id)
        except SchedulerError as exc:
            return False, None, f"lookup of job {advice.slurm_job_id} failed: {exc}"
        if lookup.job is not None:
            return True, observation_of(lookup.job), ""
        if lookup.history is None:
            note = "slurmctld does not list the job and the cluster keeps no accounting"
        elif lookup.history:
            last = lookup.last_record
            assert last is not None
            note = (
                f"slurmctld has forgotten the job; accounting has {len(lookup.history)} record(s), "
                f"the last {last.state}"
            )
        else:
            note = "neither slurmctld nor accounting knows the job"
        return True, None, note

    async def reconcile_one(self, advice_id: int, snapshot: Snapshot, *, complete: bool) -> int:
        """Plan and take the next step of one Advice from the pass's observation; returns 1 if a command was sent."""
        now = utcnow()
        async with self.ctx.sessions() as session:
            advice = await advice_queries.get_advice(session, advice_id=advice_id)
            if advice is None or not advice_service.is_active(advice):
                return 0
            job = await job_queries.get_job(session, job_id=advice.job_id)
            array = (job.array_job_id, job.array_task_id) if job else (None, None)
            state = advice_state(advice)
            held_back = release_block_reason(
                advice.checkpoint_check,
                partition=job.partition if job else None,
                block_partitions=self.settings.checkpoint_check_block_partitions,
            )
            bind(job_id=advice.slurm_job_id, attempt_index=advice.attempt_index, generation=advice.generation)
            twin_path = advice.operation == "RESTART" and advice.rule == Rule.RELEASE_SINGLETON_TWIN.value
        if twin_path:  # auto_resume_mode singleton_dependency: the retry is the held twin job
            return await singleton.reconcile_twin(self, advice_id, state, snapshot)
        observed, obs, note = await self._observe(advice, snapshot, complete)
        if not observed:
            await self._backoff(advice_id, note)
            return 0
        if await self.stacks_first(advice_id, state, obs):
            return 0  # the advisor weighs the node the stacks blame before the attempt is ended
        target = command_target(advice.slurm_job_id, snapshot.get(advice.slurm_job_id), array)
        if target is None:
            await self._backoff(
                advice_id,
                f"job {advice.slurm_job_id} is an array record that still stands for several pending tasks; "
                "not acting until it is one task",
            )
            return 0
        async with self.ctx.sessions() as session, session.begin():
            advice = await advice_queries.get_advice(session, advice_id=advice_id)
            if advice is None or advice.generation != state.generation or not advice_service.is_active(advice):
                return 0
            actions = (await advice_queries.milestones_of_advice(session, advice_ids=[advice_id]))[advice_id]
            for action in actions:
                if action.status == advice_service.STARTED:
                    evidence = effect_observed(action.step, state, obs)
                    if evidence:
                        await advice_service.confirm_action(session, action=action, evidence=evidence, now=now)
            milestones = advice_service.as_milestones(actions)
            step = plan_next_step(state, obs, now=now, milestones=milestones, authorized=True)
            if held_back and step.kind is StepKind.RELEASE:
                step = Step(StepKind.WAIT, held_back)
            if note and step.kind in {StepKind.DONE, StepKind.ABANDON}:
                step = Step(step.kind, f"{step.message} ({note})", step.reason)
            if step.kind in {StepKind.DONE, StepKind.ABANDON}:
                await advice_service.set_status(
                    session,
                    advice=advice,
                    disposition=step.disposition,
                    reason=step.reason.value if step.reason else None,
                    message=step.message,
                    next_reconcile_at=None,
                    now=now,
                )
                return 0
            if step.kind is StepKind.WAIT:
                await advice_service.set_status(
                    session,
                    advice=advice,
                    disposition=Disposition.PENDING,
                    reason=None,
                    message=step.message,
                    next_reconcile_at=now + dt.timedelta(seconds=self.interval),
                    now=now,
                )
                return 0
            kind = ActionKind.CANCEL if step.kind is StepKind.CANCEL else ActionKind.REQUEUE
            question = self.gate_question(kind, job, advice)
            answer = may_send(question)
            if not answer.allowed:
                if await self.close_decided_in_observe(session, advice=advice, answer=answer, now=now):
                    return 0
                plan = shadow_plan(state, obs, now=now, milestones=milestones)
                await advice_service.record_shadow(
                    session, advice=advice, steps=plan, now=now, target=target, gate=answer.record
                )
                would = [(s, target) for s in plan if s.is_action]
                await self.keep_unauthorized(session, advice=advice, why_not=answer.message, would=would, now=now)
                return 0
            if await self.fleet_held(session, advice=advice, in_flight=bool(milestones), now=now):
                return 0
        return await self.execute(advice_id, state, step, target, gate=answer.record)

    async def stacks_first(self, advice_id: int, state: AdviceState, obs: JobObservation | None) -> bool:
        """Capture every rank's stack once before the attempt is ended (worker/stack_capture.py); True while this pass
        must wait for the advisor to weigh the node the stacks blame (bounded by STACK_WEIGH_WAIT)."""
        running = obs is not None and obs.state.upper() == "RUNNING" and obs.restart_count == state.attempt_index
        if not self.settings.stack_capture or not running or state.operation not in {"RESTART", "TERMINATE"}:
            return False
        assert obs is not None
        async with self.ctx.sessions() as session:
            advice = await advice_queries.get_advice(session, advice_id=advice_id)
            if advice is None:
                return False
            existing = await evidence_queries.stack_capture_of_attempt(session, attempt_id=advice.attempt_id)
        if existing is not None:
            blamed = existing.anomaly_id is not None and (existing.judgment or {}).get("blameNode")
            weighed = f"stacks:anomaly:{existing.anomaly_id}" in (advice.evidence or {}).get("refs", [])
            young = utcnow() - existing.captured_at < dt.timedelta(seconds=STACK_WEIGH_WAIT)
            return bool(blamed and not weighed and young)
        binary = getattr(self.scheduler, "binary", None)  # the CLI adapter's Slurm binaries and environment
        taken = await stack_capture.capture(
            self.settings,
            job_id=advice.slurm_job_id,
            nodes=obs.nodes,
            srun=binary("srun") if callable(binary) else None,
            env=getattr(self.scheduler, "env", None),
        )
        log.info(
            "controller: stacks of job %s %s in %.0f ms (%s)",
            advice.slurm_job_id,
            taken.status,
            taken.duration_ms,
            "; ".join(taken.problems[:3]) or "no problem",
        )
        async with self.ctx.sessions() as session, session.begin():
            advice = await advice_queries.get_advice(session, advice_id=advice_id)
            attempt = await job_queries.get_attempt(session, attempt_id=advice.attempt_id) if advice else None
            if advice is None or attempt is None:
                return False
            row = await evidence_service.record_stack_capture(
                session,
                attempt=attempt,
                advice_id=advice.id,
                mode=advice.mode,
                trigger_anomaly_id=advice.anomaly_id,
                taken=evidence_service.TakenStacks(
                    status=taken.status,
                    command=taken.command,
                    duration_ms=taken.duration_ms,
                    bytes=taken.bytes,
                    nodes_asked=taken.nodes_asked,
                    nodes_answered=taken.nodes_answered,
                    ranks=taken.ranks,
                    reports=taken.reports,
                    problems=taken.problems,
                ),
            )
            judgment = row.judgment or {}
            if judgment.get("sentence"):
                await advice_service.cite_stacks(session, advice=advice, sentence=str(judgment["sentence"]), ref=None)
            return bool(row.anomaly_id is not None and judgment.get("blameNode"))

    def gate_question(self, kind: ActionKind, job: Job | None, advice: Advice) -> GateQuestion:
        """What the one gate reads for a command of this Advice: the ceiling, the job now, the mode it was decided
        under and the review (the fleet rules are asked after it, since asking them takes a budget grant)."""
        return GateQuestion(
            kind=kind,
            ceiling=self.settings.acknowledge_scheduler_actions,
            partition_managed=self.settings.partition_managed(job.partition) if job is not None else False,
            job_known=job is not None,
            requested_mode=job.requested_mode if job is not None else None,
            decided_mode=advice.mode,
            vetoed=advice.review == advice_service.VETOED,
        )

    async def close_decided_in_observe(
        self, session: Session, *, advice: Advice, answer: GateAnswer, now: dt.datetime
    ) -> bool:
        """The mode is act now but the Advice was decided in observe mode: it is never carried out, so it ends
        ABANDONED / DECIDED_IN_OBSERVE (an operator may decide a recent failure again: app.advice.redecide)."""
        if answer.reason is not GateReason.DECIDED_IN_OBSERVE:
            return False
        await advice_service.set_status(
            session,
            advice=advice,
            disposition=Disposition.ABANDONED,
            reason=GateReason.DECIDED_IN_OBSERVE.value,
            message=answer.message,
            next_reconcile_at=None,
            now=now,
        )
        return True

    async def keep_unauthorized(
        self,
        session: Session,
        *,
        advice: Advice,
        why_not: str,
        would: Sequence[tuple[Step, JobTarget | int | str]],
        now: dt.datetime,
    ) -> None:
        """The Advice stays PENDING, not authorized: the message says why and which commands would run."""
        text = ", then ".join(advice_service.command_text(step, target) for step, target in would)
        await advice_service.keep_pending(
            session,
            advice=advice,
            reason=DispositionReason.NOT_AUTHORIZED.value,
            message=f"{why_not}; would run: {text}",
            now=now,
        )

    async def fleet_held(self, session: Session, *, advice: Advice, in_flight: bool, now: dt.datetime) -> bool:
        """Whether fleet-wide trust (app/fleet: a restart storm, a spent recovery budget) holds the Advice for an
        operator; if so it stays PENDING saying why."""
        held = await fleet_service.gate(session, settings=self.settings, advice=advice, in_flight=in_flight, now=now)
        if held is None:
            return False
        await advice_service.keep_pending(session, advice=advice, reason=held.reason, message=held.message, now=now)
        return True

    # ------------------------------------------------------------ commands

    async def execute(
        self, advice_id: int, state: AdviceState, step: Step, target: JobTarget | None = None, *, gate: str
    ) -> int:
        """STARTED milestone (with the gate's answer), the command, SUCCEEDED/FAILED: each committed on its own."""
        if self.fence is not None and not await self.fence():
            log.warning("controller: lease no longer ours; not sending %s for Advice %s", step.kind.value, advice_id)
            return 0
        assert step.idempotency_key is not None

        def accept(advice: Advice) -> bool:
            # Vetoed, superseded or closed since the plan: do not act.
            return advice.generation == state.generation and advice_service.is_active(advice)

        async def settle(session: Session, advice: Advice, action: SchedulerAction, sent: Sent) -> int:
            self.commands += 1
            now = utcnow()
            if sent.error is None:
                result: CommandResult | None = sent.result
                detail = (result.stderr or result.stdout).strip() if result else ""
                if result and result.command[:1] and result.command[0] in {"GET", "POST", "DELETE"}:
                    detail = f"slurmrestd: {' '.join(result.command[:2])}" + (f"; {detail}" if detail else "")
                await advice_service.finish_action(
                    session,
                    action=action,
                    advice=advice,
                    succeeded=True,
                    duration_ms=sent.duration_ms,
                    detail=f"{step.message}" + (f"; {detail}" if detail else ""),
                    now=now,
                )
                await advice_service.record_sent(session, advice=advice, command=sent.command, now=now)
                return 1
            await advice_service.finish_action(
                session,
                action=action,
                advice=advice,
                succeeded=False,
                duration_ms=sent.duration_ms,
                detail=str(sent.error),
                now=now,
            )
            if isinstance(sent.error, OperationDisabled):
                await advice_service.set_status(
                    session,
                    advice=advice,
                    disposition=Disposition.ABANDONED,
                    reason=DispositionReason.REQUEUE_DISABLED.value,
                    message=f"Slurm refused {sent.command}: {sent.error.message}",
                    next_reconcile_at=None,
                    now=now,
                )
                return 0
            # Not found, state conflicts and outages: look again (fresh observation) after a backoff.
            await advice_service.record_reconcile_failure(
                session,
                advice=advice,
                error=str(sent.error),
                retry_at=now + backoff_delay(advice.reconcile_failures),
                now=now,
            )
            return 0

        hook = self.step_hook
        return await run_command(
            self.ctx,
            advice_id=advice_id,
            step=step.kind,
            key=step.idempotency_key,
            actor="controller",
            gate=gate,
            # an array task by <array id>_<task id> (see command_target), never the bare id
            command_of=lambda job_id: advice_service.command_text(step, target if target is not None else job_id),
            send=lambda job_id: self._send(step, target if target is not None else job_id),
            settle=settle,
            accept=accept,
            lock=True,
            before=None if hook is None else lambda: hook("before", step.kind),
            after=None if hook is None else lambda: hook("after", step.kind),
        )

    async def _send(self, step: Step, job_id: JobTarget) -> CommandResult:
        if step.kind is StepKind.REQUEUE_HOLD:
            return await self.scheduler.requeue_hold(job_id)
        if step.kind is StepKind.SET_EXCLUSIONS:
            return await self.scheduler.set_excluded_nodes(job_id, step.exclusions)
        if step.kind is StepKind.RELEASE:
            return await self.scheduler.release(job_id)
        if step.kind is StepKind.CANCEL:
            return await self.scheduler.cancel(job_id)
        raise ValueError(f"not a command: {step.kind}")

    async def _backoff(self, advice_id: int, error: str) -> None:
        async with self.ctx.sessions() as session, session.begin():
            advice = await advice_queries.get_advice(session, advice_id=advice_id)
            if advice is None or not advice.active:
                return
            now = utcnow()
            await advice_service.record_reconcile_failure(
                session, advice=advice, error=error, retry_at=now + backoff_delay(advice.reconcile_failures), now=now
            )
