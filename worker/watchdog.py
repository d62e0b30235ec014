"""Watchdog: releases jobs left held by OUR requeue-hold when their Advice is no longer active or the hold is
stale (SPEC §6).

It exists so that a dead or stuck controller fails open rather than leaving jobs held
forever. A release passes the one gate (app.domain.decision.gate, kind watchdog_release), which reads only the
watchdog's own switch, settings.watchdog_mode (the operator's ceiling does not cover undoing our own
hold, so a rollback with the ceiling off still fails open). Allowed, it releases; otherwise it
only writes `watchdog.would_release` (once per hold), with the gate's answer on the SHADOW row.
The rules are `app.domain.control.watchdog.judge_hold`: a hold is ours only while our REQUEUE_HOLD milestone
exists with no release of ours after it, Slurm still shows a requeue-hold and the restart count is
the attempt our requeue created, so `scontrol hold`, `uhold`, `sbatch --hold`, RequeueExitHold and
MaxBatchRequeue holds are never touched. Candidates come from the database (Advice with a requeue-
hold milestone whose job is not ended), so an idle watchdog costs one query and no Slurm call.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from app.advice import queries as advice_queries
from app.advice import service as advice_service
from app.domain.control import states
from app.domain.control.planner import StepKind
from app.domain.control.watchdog import AdviceHoldState, HeldJob, advice_hold_state, judge_hold
from app.domain.decision.gate import ActionKind, GateAnswer, GateQuestion, may_send
from app.infra import metrics
from app.infra.context import AppContext
from app.infra.db import Session, utcnow
from app.infra.log_format import log_context
from app.slurm.adapter import JobTarget, Scheduler
from worker.controller import command_target, observation_of
from worker.milestones import Sent, run_command
from worker.service import Service

if TYPE_CHECKING:  # row types for annotations only: the SQL lives in the areas' queries
    from app.advice.models import Advice, SchedulerAction

log = logging.getLogger("recovery.watchdog")

DEFAULT_INTERVAL = 5.0
HOLD_STATUSES = (advice_service.STARTED, advice_service.SUCCEEDED)  # a hold we placed (or may have)


class Watchdog(Service):
    """Releases stale holds our controller placed; never a hold it did not cause."""

    name = "watchdog"

    def __init__(self, ctx: AppContext, scheduler: Scheduler, *, interval: float = DEFAULT_INTERVAL) -> None:
        super().__init__(interval=interval)
        self.ctx = ctx
        self.settings = ctx.settings
        self.scheduler = scheduler
        self.fence: Callable[[], Awaitable[bool]] | None = None
        self.releases = 0

    async def candidates(self) -> list[tuple[Advice, AdviceHoldState, SchedulerAction]]:
        """Advice whose job may still carry a hold our requeue placed (from our milestones; no Slurm call)."""
        async with self.ctx.sessions() as session:
            rows = await advice_queries.advice_with_step(
                session, cluster=self.settings.cluster, step=StepKind.REQUEUE_HOLD.value, statuses=HOLD_STATUSES
            )
            # A held job is PENDING; COMPLETED/CANCELLED jobs carry no hold (a failed attempt may not be
            # replaced by its held successor in our records yet, so other end states stay candidates).
            rows = [(advice, state) for advice, state in rows if state not in states.CLEAN_END]
            actions = await advice_queries.milestones_of_advice(session, advice_ids=[advice.id for advice, _ in rows])
        out = []
        for advice, _ in rows:
            milestones = advice_service.as_milestones(actions[advice.id])
            hold_state, _since = advice_hold_state(
                active=advice_service.is_active(advice),
                generation=advice.generation,
                attempt_index=advice.attempt_index,
                milestones=milestones,
            )
            if not hold_state.caused_hold:
                continue
            hold_action = next(
                a
                for a in reversed(actions[advice.id])
                if a.step == StepKind.REQUEUE_HOLD.value and a.status in HOLD_STATUSES
            )
            out.append((advice, hold_state, hold_action))
        return out

    async def tick(self) -> None:
        found = await self.candidates()
        if not found:
            return
        snapshot = await self.scheduler.list_jobs()
        now = utcnow()
        for advice, hold_state, hold_action in found:
            job = snapshot.get(advice.slurm_job_id)
            if job is None:
                continue
            held = HeldJob(
                job_id=job.job_id,
                observation=observation_of(job),
                held_since=hold_action.finished_at or hold_action.started_at,
            )
            verdict = judge_hold(held, hold_state, now=now, hold_bound=self.settings.watchdog_hold_bound)
            if not verdict.release:
                continue
            # an array task by <array id>_<task id>: the bare id of an array's last task releases every task
            target = command_target(job.job_id, job, (None, None))
            if target is None:
                continue
            with log_context(
                advice_id=advice.id,
                generation=advice.generation,
                job_id=advice.slurm_job_id,
                attempt_index=advice.attempt_index,
            ):
                answer = self.gate()
                if answer.allowed:
                    await self._release(advice.id, hold_action.id, verdict.reason, verdict.message, target, answer)
                else:
                    await self._would_release(
                        advice.id, hold_action.id, verdict.reason, verdict.message, target, answer
                    )

    def gate(self) -> GateAnswer:
        """The one gate's answer for a release of our own hold (its own switch decides; decision/gate.py)."""
        return may_send(
            GateQuestion(
                kind=ActionKind.WATCHDOG_RELEASE,
                ceiling=self.settings.acknowledge_scheduler_actions,
                switch=self.settings.watchdog_mode,
            )
        )

    async def _would_release(
        self, advice_id: int, hold_action_id: int, reason: str, message: str, target: JobTarget, answer: GateAnswer
    ) -> None:
        """Not allowed by the gate: say once per hold what act mode would do (a SHADOW row keeps it to once)."""
        async with self.ctx.sessions() as session, session.begin():
            advice = await advice_queries.get_advice(session, advice_id=advice_id)
            assert advice is not None
            await advice_service.record_would_release(
                session,
                advice=advice,
                key=f"watchdog-shadow:{advice_id}:{hold_action_id}:release",
                reason=reason,
                message=message,
                target=target,
                gate=answer.record,
            )

    async def _release(
        self, advice_id: int, hold_action_id: int, reason: str, message: str, target: JobTarget, answer: GateAnswer
    ) -> None:
        """Allowed by the gate: release with the same write-ahead milestones as the controller."""
        if self.fence is not None and not await self.fence():
            log.warning("watchdog: lease no longer ours; not releasing for Advice %s", advice_id)
            return

        async def settle(session: Session, advice: Advice, action: SchedulerAction, sent: Sent) -> int:
            detail = f"{reason}: {message}" if sent.error is None else f"{reason}: {message}; failed: {sent.error}"
            await advice_service.finish_action(
                session,
                action=action,
                advice=advice,
                succeeded=sent.error is None,
                duration_ms=sent.duration_ms,
                detail=detail,
                component="watchdog",
                event_type="watchdog.release",
            )
            metrics.WATCHDOG_RELEASES.labels("released" if sent.error is None else "failed").inc()
            if sent.error is None:
                self.releases += 1
                log.warning("watchdog released job %s (%s)", sent.job_id, message)
            return 1 if sent.error is None else 0

        await run_command(
            self.ctx,
            advice_id=advice_id,
            step=StepKind.RELEASE,
            key=f"watchdog:{advice_id}:{hold_action_id}:release",
            actor="watchdog",
            gate=answer.record,
            command_of=lambda job_id: f"scontrol release {target}",
            send=lambda job_id: self.scheduler.release(target),
            settle=settle,
        )
