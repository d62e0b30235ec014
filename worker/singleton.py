"""The controller's path for `auto_resume_mode: singleton_dependency` (app/domain/control/singleton.py has the rules).

A RESTART of such a job is carried out on its held twin, not by requeueing it: find the twin (same
name, user and comment, `--dependency=singleton`, held) in the pass's observation and remember it on
the Advice, cancel the first job if it still runs (a hang), set the exclusions on the twin, release
it, and report CONVERGED once a fresh observation shows the twin unheld with the exclusions. Every
command goes through the controller's own `execute` (milestones, idempotency keys, lease fencing)
after the one gate (app.domain.decision.gate, kind twin_release) allowed it; when it does not, SHADOW actions
are recorded, exactly as for requeue.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from app.advice import queries as advice_queries
from app.advice import service as advice_service
from app.domain.control.planner import AdviceState, Step, StepKind
from app.domain.control.singleton import JobView, choose_twin, plan_twin_step, twin_shadow_plan
from app.domain.decision.gate import ActionKind, GateAnswer, GateQuestion, may_send
from app.infra.config import Settings
from app.infra.context import AppContext
from app.infra.db import Session, utcnow
from app.jobs import queries as job_queries
from app.slurm.adapter import JobTarget
from app.slurm.records import SlurmJob, Snapshot

if TYPE_CHECKING:  # the row types for annotations only
    from app.advice.models import Advice
    from app.jobs.models import Job


class Controller(Protocol):
    """What this path uses of worker.controller.Controller (its settings, authorization, holds and command runner)."""

    ctx: AppContext
    settings: Settings
    interval: float

    def gate_question(self, kind: ActionKind, job: Job | None, advice: Advice) -> GateQuestion: ...

    async def close_decided_in_observe(
        self, session: Session, *, advice: Advice, answer: GateAnswer, now: dt.datetime
    ) -> bool: ...

    async def keep_unauthorized(
        self,
        session: Session,
        *,
        advice: Advice,
        why_not: str,
        would: Sequence[tuple[Step, JobTarget | int | str]],
        now: dt.datetime,
    ) -> None: ...

    async def fleet_held(self, session: Session, *, advice: Advice, in_flight: bool, now: dt.datetime) -> bool: ...

    async def execute(
        self, advice_id: int, state: AdviceState, step: Step, target: JobTarget | None = None, *, gate: str
    ) -> int: ...


log = logging.getLogger("recovery.controller")


def job_view(job: SlurmJob) -> JobView:
    """The twin rules' view of one squeue record."""
    return JobView(
        job_id=job.job_id,
        name=job.name,
        user=job.user,
        state=job.state,
        held=job.held,
        dependency=job.dependency,
        comment=job.comment,
        excluded_nodes=tuple(job.excluded_nodes),
        partition=job.partition,
    )


async def reconcile_twin(controller: Controller, advice_id: int, state: AdviceState, snapshot: Snapshot) -> int:
    """One step of a singleton_dependency RESTART; returns 1 when a command was sent."""
    now = utcnow()
    ctx = controller.ctx
    async with ctx.sessions() as session, session.begin():
        advice = await advice_queries.get_advice(session, advice_id=advice_id)
        if advice is None or advice.generation != state.generation or not advice_service.is_active(advice):
            return 0
        job = await job_queries.get_job(session, job_id=advice.job_id)
        if job is None:
            return 0
        seen = snapshot.get(advice.slurm_job_id)
        first = (
            job_view(seen)
            if seen is not None
            else JobView(
                job_id=advice.slurm_job_id,
                name=job.name or "",
                user=job.user or "",
                state="GONE",
                held=False,
                dependency=None,
                comment=job.comment or "",
            )
        )
        if advice.successor_job_id is None:
            identity = JobView(
                job_id=first.job_id,
                name=job.name or first.name,
                user=job.user or first.user,
                state=first.state,
                held=first.held,
                dependency=first.dependency,
                comment=job.comment or first.comment,
            )
            twin = choose_twin(identity, (job_view(j) for j in snapshot.jobs))
            if twin is not None:
                await advice_service.record_twin(
                    session, advice=advice, twin_job_id=twin.job_id, twin_name=twin.name, dependency=twin.dependency
                )
        twin_id = advice.successor_job_id
        twin_seen = snapshot.get(twin_id) if twin_id is not None else None
        twin_obs = job_view(twin_seen) if twin_seen is not None else None
        actions = (await advice_queries.milestones_of_advice(session, advice_ids=[advice_id]))[advice_id]
        milestones = advice_service.as_milestones(actions)
        planned = plan_twin_step(state, first, twin_obs, twin_id=twin_id, now=now, milestones=milestones)
        step = planned.step
        if step.kind in {StepKind.DONE, StepKind.ABANDON, StepKind.WAIT}:
            await advice_service.set_status(
                session,
                advice=advice,
                disposition=step.disposition,
                reason=step.reason.value if step.reason else None,
                message=step.message,
                next_reconcile_at=None
                if step.kind is not StepKind.WAIT
                else now + dt.timedelta(seconds=controller.interval),
                now=now,
            )
            return 0
        answer = may_send(controller.gate_question(ActionKind.TWIN_RELEASE, job, advice))
        if not answer.allowed:
            if await controller.close_decided_in_observe(session, advice=advice, answer=answer, now=now):
                return 0
            plan = twin_shadow_plan(state, first, twin_obs)
            for shadow, target in plan:
                await advice_service.record_shadow(
                    session, advice=advice, steps=[shadow], now=now, target=target, gate=answer.record
                )
            await controller.keep_unauthorized(session, advice=advice, why_not=answer.message, would=plan, now=now)
            return 0
        # the same fleet-wide trust as a requeue (app/fleet): a restart storm or a spent budget holds it
        if await controller.fleet_held(session, advice=advice, in_flight=bool(milestones), now=now):
            return 0
    return await controller.execute(advice_id, state, step, planned.target, gate=answer.record)
