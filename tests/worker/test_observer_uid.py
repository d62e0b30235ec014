"""The observer stores Slurm's numeric uid/gid on the job (its files are read with that user's rights only)."""

from __future__ import annotations

import dataclasses
import json

from sqlalchemy import select

from app.infra.context import AppContext
from app.jobs.models import Job
from app.slurm.fake import FakeScheduler, make_job
from worker.observer import Observer

COMMENT = json.dumps(
    {
        "APS": {
            "workflow_id": "wf",
            "environment": "test-env",
            "mode": "observe",
            "auto_resume_mode": "requeue",
            "max_requeue_times": 1,
        }
    }
)


async def _job(ctx: AppContext, slurm_job_id: int) -> Job:
    async with ctx.sessions() as session:
        job = await session.scalar(select(Job).where(Job.slurm_job_id == slurm_job_id))
    assert job is not None
    return job


async def test_uid_and_gid_are_stored_and_filled_in_for_older_rows(ctx: AppContext) -> None:
    scheduler = FakeScheduler()
    observer = Observer(ctx, scheduler)
    scheduler.add(make_job(21, comment=COMMENT, user="alice", user_id=1234, group_id=1235))
    scheduler.add(make_job(22, comment=COMMENT, user="bob", user_id=None, group_id=None))  # Slurm did not say
    await observer.tick()
    alice, bob = await _job(ctx, 21), await _job(ctx, 22)
    assert (alice.user, alice.user_id, alice.group_id) == ("alice", 1234, 1235)
    assert (bob.user_id, bob.group_id) == (None, None)
    # the job changes in squeue and now carries its uid: the row learns it (a uid never changes afterwards)
    scheduler.jobs[22] = dataclasses.replace(scheduler.jobs[22], user_id=2000, group_id=2001)
    scheduler.start(22)
    scheduler.jobs[21] = dataclasses.replace(scheduler.jobs[21], user_id=9999)
    scheduler.start(21)
    await observer.tick()
    assert ((await _job(ctx, 22)).user_id, (await _job(ctx, 22)).group_id) == (2000, 2001)
    assert (await _job(ctx, 21)).user_id == 1234
