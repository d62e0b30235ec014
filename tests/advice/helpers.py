"""Helpers shared by the Advice, advisor, controller and watchdog tests: jobs through the real observer, a
Slurm-like fake. Rows and reads come from tests.factories."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from app.advice.models import Advice
from app.infra.context import AppContext
from app.slurm.fake import FakeScheduler, make_job
from tests.factories import add_anomaly, advice_of
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

    async def requeue_hold(self, target: int | str):
        result = await super().requeue_hold(target)
        job_id = self.calls[-1][1]  # the job the target named ("151_4" -> the task's own id)
        assert job_id is not None
        self.jobs[job_id] = dataclasses.replace(self.jobs[job_id], state_description="job requeued in held state")
        return result

    async def release(self, target: int | str):
        result = await super().release(target)
        job_id = self.calls[-1][1]
        assert job_id is not None
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
