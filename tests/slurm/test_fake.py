"""FakeScheduler follows the transitions observed on real Slurm, so unit tests of logic can trust it."""

from __future__ import annotations

import pytest

from app.slurm.adapter import Scheduler
from app.slurm.errors import JobNotFound, JobStateConflict, OperationDisabled, TransientSchedulerError
from app.slurm.fake import FakeScheduler, make_job


async def test_fake_requeue_hold_exclude_release_cycle() -> None:
    fake = FakeScheduler([make_job(7)])
    assert isinstance(fake, Scheduler)
    fake.start(7, ["node1"])
    fake.finish(7, "FAILED", exit_code=1)
    await fake.requeue_hold(7)
    held = (await fake.list_jobs()).get(7)
    assert held is not None
    assert held.state == "PENDING" and held.held and held.restart_count == 1 and held.priority == 0
    await fake.set_excluded_nodes(7, ["node1"])
    await fake.release(7)
    released = (await fake.list_jobs()).get(7)
    assert released is not None
    assert not released.held and released.excluded_nodes == ("node1",)
    history = await fake.job_history(7)
    assert history is not None
    assert [(r.attempt, r.state, r.exit_code) for r in history] == [(0, "FAILED", 1)]
    assert [call[0] for call in fake.calls] == [
        "requeue_hold",
        "list_jobs",
        "set_excluded_nodes",
        "release",
        "list_jobs",
        "job_history",
    ]


async def test_fake_refusals_match_slurm() -> None:
    fake = FakeScheduler([make_job(1, requeue=False, state="RUNNING"), make_job(2)])
    with pytest.raises(OperationDisabled):
        await fake.requeue_hold(1)
    with pytest.raises(JobStateConflict):
        await fake.requeue_hold(2)  # pending: "Job is pending execution"
    with pytest.raises(JobNotFound):
        await fake.release(99)
    fake.fail_next("list_jobs", TransientSchedulerError("down"))
    with pytest.raises(TransientSchedulerError):
        await fake.list_jobs()
    assert len((await fake.list_jobs()).jobs) == 2


async def test_fake_cancel_and_lookup() -> None:
    fake = FakeScheduler([make_job(3, state="RUNNING", nodes=("node2",))], accounting=False)
    await fake.cancel(3)
    await fake.cancel(3)  # already ended: no error, as scancel
    lookup = await fake.lookup_job(3)
    assert lookup.job is not None
    assert lookup.job.state == "CANCELLED" and lookup.history is None and lookup.found
    fake.remove(3)
    assert not (await fake.lookup_job(3)).found
