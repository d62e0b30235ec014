"""Helpers shared by the Advice, advisor, controller and watchdog tests: jobs through the real observer, a
Slurm-like fake."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from sqlalchemy import select

from app.advice.models import Advice, SchedulerAction
from app.audit.models import AuditEvent
from app.context import AppContext
from app.evidence.models import Anomaly
from app.jobs.models import Attempt
from app.slurm.fake import FakeScheduler, make_job
from worker.advisor import Advisor
from worker.observer import Observer


def comment(environment: str = "test-env", **changes: Any) -> str:
    body = {
        "workflow_id": "wf",
        "environment": environment,
        "mode": "act",
        "auto_resume_mode": "requeue",
        "max_requeue_times": 2,
        **changes,
    }
    return json.dumps({"APS": body})


class SlurmLikeFake(FakeScheduler):
    """The in-memory fake plus the description real 22.05 shows for a requeue-hold (NOTES §3)."""

    async def requeue_hold(self, job_id: int):
        result = await super().requeue_hold(job_id)
        self.jobs[job_id] = dataclasses.replace(self.jobs[job_id], state_description="job requeued in held state")
        return result

    async def release(self, job_id: int):
        result = await super().release(job_id)
        self.jobs[job_id] = dataclasses.replace(self.jobs[job_id], state_description=None)
        return result

    def count(self, method: str) -> int:
        return sum(1 for call in self.calls if call[0] == method)


def acting(ctx: AppContext, **changes: Any) -> AppContext:
    """The same database with other settings (e.g. the acknowledgment ceiling on)."""
    return AppContext(settings=dataclasses.replace(ctx.settings, **changes), engine=ctx.engine, sessions=ctx.sessions)


async def submit(observer: Observer, fake: FakeScheduler, job_id: int, *, node: str = "node1", **policy: Any) -> None:
    """A running enrolled job, registered by the real observer."""
    requeue = policy.pop("requeue", True)
    fake.add(make_job(job_id, comment=comment(**policy), requeue=requeue))
    fake.start(job_id, [node])
    await observer.tick()


async def attempt(ctx: AppContext, job_id: int, index: int = 0) -> Attempt:
    async with ctx.sessions() as session:
        found = await session.scalar(
            select(Attempt).where(Attempt.slurm_job_id == job_id, Attempt.attempt_index == index)
        )
        assert found is not None
        return found


async def add_anomaly(
    ctx: AppContext,
    job_id: int,
    *,
    kind: str = "CRASH",
    index: int = 0,
    node: str | None = None,
    category: str = "segfault",
    key: str | None = None,
) -> int:
    """An anomaly row as the watcher writes it."""
    target = await attempt(ctx, job_id, index)
    async with ctx.sessions() as session, session.begin():
        row = Anomaly(
            attempt_id=target.id,
            event_key=key or f"{job_id}-{index}-{kind}-{node}-{category}",
            kind=kind,
            category=category,
            detector="test",
            message=f"{kind} {category}",
            node=node,
            line="Rank0: segmentation fault",
        )
        session.add(row)
        await session.flush()
        return row.id


async def advice_of(ctx: AppContext, job_id: int) -> list[Advice]:
    async with ctx.sessions() as session:
        return list(
            (
                await session.scalars(
                    select(Advice).where(Advice.slurm_job_id == job_id).order_by(Advice.attempt_index)
                )
            ).all()
        )


async def actions(ctx: AppContext, advice_id: int | None = None) -> list[SchedulerAction]:
    async with ctx.sessions() as session:
        query = select(SchedulerAction).order_by(SchedulerAction.id)
        if advice_id is not None:
            query = query.where(SchedulerAction.advice_id == advice_id)
        return list((await session.scalars(query)).all())


async def events(ctx: AppContext, event_type: str) -> list[AuditEvent]:
    async with ctx.sessions() as session:
        return list(
            (
                await session.scalars(
                    select(AuditEvent).where(AuditEvent.event_type == event_type).order_by(AuditEvent.id)
                )
            ).all()
        )


async def failed_job(
    ctx: AppContext, fake: SlurmLikeFake, job_id: int, *, node: str | None = "node1", **policy
) -> Advice:
    """A job whose attempt 0 crashed on `node` and failed, decided by the real advisor."""
    observer, advisor = Observer(ctx, fake), Advisor(ctx)
    await advisor.tick()
    await submit(observer, fake, job_id, **policy)
    if node:
        await add_anomaly(ctx, job_id, node=node, category="xid")
    fake.finish(job_id, "FAILED", exit_code=1)
    await observer.tick()
    await advisor.tick()
    [advice] = await advice_of(ctx, job_id)
    return advice
