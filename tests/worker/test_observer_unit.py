"""Observer logic on both databases, driven by an in-memory scheduler (real-Slurm tests live beside it)."""

import dataclasses
import json
from pathlib import Path

import pytest
from sqlalchemy import func, select

from app.audit.models import AuditEvent
from app.infra.context import AppContext
from app.jobs.models import Attempt, Job
from app.slurm.errors import TransientSchedulerError
from app.slurm.fake import FakeScheduler, make_job
from app.slurm.parse import parse_snapshot
from app.slurm.records import Snapshot
from worker.observer import Observer

POLICY = {
    "APS": {
        "workflow_id": "wf",
        "environment": "test-env",
        "mode": "act",
        "auto_resume_mode": "requeue",
        "max_requeue_times": 1,
    }
}


def _comment(**changes) -> str:
    return json.dumps({"APS": {**POLICY["APS"], **changes}})


@pytest.fixture
def scheduler() -> FakeScheduler:
    return FakeScheduler()


@pytest.fixture
def observer(ctx: AppContext, scheduler: FakeScheduler) -> Observer:
    return Observer(ctx, scheduler)


async def _attempts(ctx: AppContext, job_id: int) -> list[Attempt]:
    async with ctx.sessions() as session:
        return list(
            (
                await session.scalars(
                    select(Attempt).where(Attempt.slurm_job_id == job_id).order_by(Attempt.attempt_index)
                )
            ).all()
        )


async def _events(ctx: AppContext, event_type: str) -> list[AuditEvent]:
    async with ctx.sessions() as session:
        return list((await session.scalars(select(AuditEvent).where(AuditEvent.event_type == event_type))).all())


async def test_enrolled_job_gets_attempt_zero_and_state_changes(ctx, observer, scheduler) -> None:
    scheduler.add(make_job(7, comment=_comment(), stdout="/logs/out-7.log", stderr="/logs/err-7.log"))
    scheduler.start(7, ["node1"])
    await observer.tick()
    [a0] = await _attempts(ctx, 7)
    assert (a0.attempt_index, a0.state, a0.nodes, a0.stdout_path) == (0, "RUNNING", ["node1"], "/logs/out-7.log")
    scheduler.finish(7, "FAILED", exit_code=1)
    await observer.tick()
    [a0] = await _attempts(ctx, 7)
    assert (a0.state, a0.exit_code) == ("FAILED", 1)
    async with ctx.sessions() as session:
        job = await session.scalar(select(Job))
    assert job.enrolment == "ENROLLED" and job.registered_mode == "observe"
    assert "acknowledgment ceiling" in job.mode_reason


async def test_unchanged_snapshot_touches_nothing(ctx, observer, scheduler) -> None:
    scheduler.add(make_job(7, comment=_comment()))
    await observer.tick()
    async with ctx.sessions() as session:
        before = await session.scalar(select(func.count()).select_from(AuditEvent))
    assert await observer.apply(await scheduler.list_jobs()) == 0
    async with ctx.sessions() as session:
        assert await session.scalar(select(func.count()).select_from(AuditEvent)) == before


async def test_requeue_creates_next_attempt_and_keeps_previous(ctx, observer, scheduler) -> None:
    scheduler.add(make_job(8, comment=_comment(), stdout="/logs/out-8-0.log"))
    scheduler.start(8, ["node1"])
    await observer.tick()
    scheduler.finish(8, "FAILED", exit_code=1)
    await observer.tick()
    await scheduler.requeue_hold(8)
    scheduler.jobs[8] = dataclasses.replace(scheduler.jobs[8], stdout="/logs/out-8-1.log")
    await observer.tick()
    a0, a1 = await _attempts(ctx, 8)
    assert (a0.state, a0.exit_code, a0.stdout_path) == ("FAILED", 1, "/logs/out-8-0.log")
    assert (a1.attempt_index, a1.state, a1.held, a1.stdout_path) == (1, "PENDING", True, "/logs/out-8-1.log")


async def test_stale_path_of_previous_attempt_is_not_given_to_the_new_one(ctx, observer, scheduler) -> None:
    scheduler.add(make_job(9, comment=_comment(), stdout="/logs/out-9.log"))
    scheduler.start(9)
    await observer.tick()
    await scheduler.requeue_hold(9)  # same path reported again: it identifies attempt 0, not 1
    await observer.tick()
    a0, a1 = await _attempts(ctx, 9)
    assert a0.state == "REQUEUED" and a0.stdout_path == "/logs/out-9.log"
    assert a1.stdout_path is None


async def test_shared_paths_are_kept_for_every_attempt(ctx, observer, scheduler) -> None:
    scheduler.add(make_job(10, comment=_comment(log_file_paths_shared_across_attempts=True), stdout="/logs/out-10.log"))
    scheduler.start(10)
    await observer.tick()
    await scheduler.requeue_hold(10)
    await observer.tick()
    assert [a.stdout_path for a in await _attempts(ctx, 10)] == ["/logs/out-10.log", "/logs/out-10.log"]


@pytest.mark.parametrize(
    ("comment", "enrolment", "reason_part"),
    [
        ('{"aps": {"environment": "test-env"}}', "NOT_ENROLLED", "APS"),
        ('{"APS": {"environment": "test-env", "mode": "fast"}', "NOT_ENROLLED", ""),
        (_comment(environment="other"), "ENVIRONMENT_MISMATCH", "'other'"),
    ],
)
async def test_failed_enrolment_is_visible_with_reason(
    ctx, observer, scheduler, comment, enrolment, reason_part
) -> None:
    scheduler.add(make_job(11, comment=comment))
    await observer.tick()
    async with ctx.sessions() as session:
        job = await session.scalar(select(Job))
    assert job.enrolment == enrolment and reason_part in job.enrolment_reason
    assert len(await _events(ctx, "policy.rejected")) == 1
    assert await _attempts(ctx, 11) == []
    await observer.tick()
    assert len(await _events(ctx, "policy.rejected")) == 1  # recorded once


async def test_plain_jobs_are_ignored(ctx, observer, scheduler) -> None:
    scheduler.add(make_job(12, comment="nightly eval"))
    scheduler.add(make_job(13, comment=json.dumps(POLICY["APS"])))  # unwrapped policy
    await observer.tick()
    async with ctx.sessions() as session:
        assert await session.scalar(select(func.count()).select_from(Job)) == 0


async def test_unmanaged_partition(ctx: AppContext, scheduler: FakeScheduler) -> None:
    settings = dataclasses.replace(ctx.settings, managed_partitions=("gpu",))
    observer = Observer(AppContext(settings, ctx.engine, ctx.sessions), scheduler)
    scheduler.add(make_job(14, comment=_comment(), partition="debug"))
    await observer.tick()
    async with ctx.sessions() as session:
        job = await session.scalar(select(Job))
        assert job is not None and job.enrolment == "UNMANAGED_PARTITION"


async def test_act_needs_ceiling_and_managed_partition(ctx: AppContext, scheduler: FakeScheduler) -> None:
    settings = dataclasses.replace(ctx.settings, acknowledge_scheduler_actions=True)
    observer = Observer(AppContext(settings, ctx.engine, ctx.sessions), scheduler)
    scheduler.add(make_job(15, comment=_comment()))
    scheduler.add(make_job(16, comment=_comment(mode="observe")))
    await observer.tick()
    async with ctx.sessions() as session:
        modes = dict((await session.execute(select(Job.slurm_job_id, Job.registered_mode))).all())
    assert modes == {15: "act", 16: "observe"}


async def test_job_id_reuse_starts_a_new_job_record(ctx, observer, scheduler) -> None:
    scheduler.add(make_job(17, comment=_comment(), name="first"))
    await observer.tick()
    scheduler.jobs[17] = make_job(17, comment=_comment(workflow_id="wf2"), name="second")
    await observer.tick()
    async with ctx.sessions() as session:
        records = (await session.scalars(select(Job).order_by(Job.incarnation))).all()
    assert [(r.incarnation, r.name, r.retired_at is not None) for r in records] == [
        (0, "first", True),
        (1, "second", False),
    ]
    assert len(await _events(ctx, "job.id_reused")) == 1
    attempts = await _attempts(ctx, 17)
    assert sorted(a.job_id for a in attempts) == sorted(r.id for r in records)


async def test_disappeared_job_uses_accounting_else_unknown_never_failed(
    ctx: AppContext, scheduler: FakeScheduler
) -> None:
    settings = dataclasses.replace(ctx.settings, unknown_grace_seconds=0)
    observer = Observer(AppContext(settings, ctx.engine, ctx.sessions), scheduler)
    scheduler.add(make_job(18, comment=_comment()))
    scheduler.start(18)
    scheduler.add(make_job(19, comment=_comment()))
    scheduler.start(19)
    await observer.tick()
    scheduler.finish(18, "FAILED", exit_code=2)  # accounting records the failure
    scheduler.remove(18)
    scheduler.jobs.pop(19)  # vanished without trace
    scheduler.history.pop(19, None)
    await observer.tick()
    [a18] = await _attempts(ctx, 18)
    [a19] = await _attempts(ctx, 19)
    assert (a18.state, a18.exit_code) == ("FAILED", 2)
    assert a19.state == "UNKNOWN"


async def test_transient_slurm_error_marks_nothing_failed(ctx, observer, scheduler) -> None:
    scheduler.add(make_job(20, comment=_comment()))
    scheduler.start(20)
    await observer.tick()
    for _ in range(3):
        scheduler.fail_next(
            "list_jobs",
            TransientSchedulerError(
                "slurm_load_jobs error: Unable to contact slurm controller", command=["squeue", "--json"]
            ),
        )
        with pytest.raises(TransientSchedulerError):
            await observer.tick()
    await observer.tick()
    [a20] = await _attempts(ctx, 20)
    assert a20.state == "RUNNING"
    assert len(await _events(ctx, "scheduler.unreachable")) == 1
    assert len(await _events(ctx, "scheduler.reachable")) == 1


async def test_partial_answer_with_slurm_errors_is_not_a_disappearance(ctx, observer, scheduler) -> None:
    scheduler.add(make_job(21, comment=_comment()))
    scheduler.start(21)
    await observer.tick()
    from app.slurm.records import Snapshot

    partial = Snapshot(
        jobs=(), taken_at=scheduler.jobs[21].submit_time, problems=("slurm reported: {'error': 'Unspecified error'}",)
    )
    await observer.apply(partial)
    assert observer.state.missing == {}
    [a21] = await _attempts(ctx, 21)
    assert a21.state == "RUNNING"


OUTAGE_2205 = Path(__file__).resolve().parents[1] / "fixtures" / "slurm" / "22.05" / "squeue-outage.json"


async def test_an_answer_with_slurm_errors_is_an_outage(
    ctx: AppContext, observer: Observer, scheduler: FakeScheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    """22.05's real answer during a slurmctld outage: exit 0, `errors`, no jobs. Not "every job left"."""
    scheduler.add(make_job(22, comment=_comment()))
    scheduler.start(22)
    await observer.tick()
    real_list_jobs = scheduler.list_jobs
    outage = parse_snapshot(OUTAGE_2205.read_bytes())
    assert outage.jobs == () and outage.slurm_errors

    async def answer_with_errors() -> Snapshot:
        return outage

    monkeypatch.setattr(scheduler, "list_jobs", answer_with_errors)
    for _ in range(3):
        with pytest.raises(TransientSchedulerError, match="answered with errors"):
            await observer.tick()
    assert observer.state.missing == {}
    [a22] = await _attempts(ctx, 22)
    assert a22.state == "RUNNING"
    [down] = await _events(ctx, "scheduler.unreachable")
    assert "Failed while looking for jobs" in down.message
    monkeypatch.setattr(scheduler, "list_jobs", real_list_jobs)
    await observer.tick()
    assert len(await _events(ctx, "scheduler.reachable")) == 1
    assert len(await _events(ctx, "scheduler.unreachable")) == 1


async def test_heterogeneous_job_is_refused_with_a_reason(ctx, observer, scheduler) -> None:
    scheduler.add(make_job(40, comment=_comment(environment=ctx.settings.environment), het_job_id=40, het_job_offset=0))
    scheduler.add(make_job(41, comment=_comment(environment=ctx.settings.environment), het_job_id=40, het_job_offset=1))
    scheduler.start(40, ["node1"])
    await observer.tick()
    async with ctx.sessions() as session:
        rows = (await session.scalars(select(Job).order_by(Job.slurm_job_id))).all()
    assert [(r.slurm_job_id, r.enrolment) for r in rows] == [(40, "HETEROGENEOUS_JOB"), (41, "HETEROGENEOUS_JOB")]
    assert "heterogeneous job 40+1" in (rows[1].enrolment_reason or "") and rows[1].workflow_id is None
    refused = await _events(ctx, "job.refused")
    assert sorted(e.slurm_job_id or 0 for e in refused) == [40, 41] and refused[0].level == "WARNING"
    assert await _attempts(ctx, 40) == []


async def test_array_task_position_is_recorded_and_follows_the_split(ctx, observer, scheduler) -> None:
    comment = _comment(environment=ctx.settings.environment)
    # the array's record while tasks 3-4 wait, then (same id) the last task once it started
    scheduler.add(make_job(60, comment=comment, array_job_id=60, array_task_id=None, array_task_string="3-4"))
    await observer.tick()
    scheduler.jobs[60] = dataclasses.replace(scheduler.jobs[60], array_task_id=4, array_task_string=None)
    scheduler.add(make_job(63, comment=comment, array_job_id=60, array_task_id=3))
    await observer.tick()
    async with ctx.sessions() as session:
        rows = {r.slurm_job_id: r for r in (await session.scalars(select(Job))).all()}
    assert (rows[60].array_job_id, rows[60].array_task_id) == (60, 4)
    assert (rows[63].array_job_id, rows[63].array_task_id) == (60, 3)
