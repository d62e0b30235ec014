"""Job registration and attempt updates keep history, summaries, audit events and the change feed."""

from sqlalchemy import select

from app.audit.models import AuditEvent
from app.domain.control.identity import attempt_uuid
from app.feed import queries as feed_queries
from app.jobs import queries as job_queries
from app.jobs import service as jobs
from app.jobs.models import Policy, Workflow


def _registration(**kw):
    base = dict(
        cluster="c1",
        slurm_job_id=42,
        environment="env",
        enrolment="ENROLLED",
        enrolment_reason=None,
        workflow_key="wf-a",
        name="train",
        partition="gpu",
        policy_valid=True,
        policy_effective={"mode": "observe"},
    )
    base.update(kw)
    return jobs.JobRegistration(**base)


async def test_enrolled_job_gets_workflow_policy_and_history(sessions) -> None:
    async with sessions() as session, session.begin():
        job = await jobs.register_job(session, registration=_registration())
        a0 = await jobs.create_attempt(
            session, job=job, attempt_index=0, state="RUNNING", nodes=["node1"], stdout_path="/logs/out-42.log"
        )
        await jobs.update_attempt(session, attempt=a0, job=job, state="FAILED", exit_code=1)
        a1 = await jobs.create_attempt(session, job=job, attempt_index=1, state="PENDING")
    async with sessions() as session:
        workflow = await session.scalar(select(Workflow))
        policy = await session.scalar(select(Policy))
        events = (await session.scalars(select(AuditEvent).order_by(AuditEvent.id))).all()
        attempts = await job_queries.attempts_of(session, job_id=job.id)
        entries = await feed_queries.read_since(session, after_id=0)
    assert workflow.workflow_key == "wf-a" and workflow.attempt_count == 2 and workflow.failed_attempt_count == 1
    assert workflow.latest_state == "PENDING"
    assert policy.valid and policy.effective == {"mode": "observe"}
    assert [e.event_type for e in events] == [
        "job.registered",
        "attempt.registered",
        "attempt.state_changed",
        "attempt.registered",
    ]
    assert "exit code 1" in events[2].message and events[2].level == "WARNING"
    # the failed attempt keeps its own state and paths after the next one starts
    assert [(a.attempt_index, a.state, a.stdout_path) for a in attempts] == [
        (0, "FAILED", "/logs/out-42.log"),
        (1, "PENDING", None),
    ]
    assert a1.uuid == attempt_uuid("c1", 42, 1) != a0.uuid
    assert {e.topic for e in entries} == {"workflow", "job", "attempt", "audit"}
    ids = [e.id for e in entries]
    assert ids == sorted(ids)


async def test_unchanged_update_writes_nothing(sessions) -> None:
    async with sessions() as session, session.begin():
        job = await jobs.register_job(session, registration=_registration())
        attempt = await jobs.create_attempt(session, job=job, attempt_index=0, state="RUNNING")
    async with sessions() as session, session.begin():
        before = await feed_queries.latest_id(session)
        attempt = await session.merge(attempt)
        assert await jobs.update_attempt(session, attempt=attempt, state="RUNNING") == []
        assert await feed_queries.latest_id(session) == before


async def test_rejected_job_has_no_workflow_but_keeps_reason(sessions) -> None:
    async with sessions() as session, session.begin():
        job = await jobs.register_job(
            session,
            registration=_registration(
                enrolment="ENVIRONMENT_MISMATCH", enrolment_reason="environment 'prod' is not 'env'"
            ),
        )
    async with sessions() as session:
        event = await session.scalar(select(AuditEvent))
        assert job.workflow_id is None
        assert event.event_type == "policy.rejected" and "environment 'prod'" in event.message
        assert (await job_queries.current_jobs(session, cluster="c1"))[42].enrolment == "ENVIRONMENT_MISMATCH"


async def test_retired_job_is_no_longer_current(sessions) -> None:
    async with sessions() as session, session.begin():
        old = await jobs.register_job(session, registration=_registration())
        await jobs.retire_job(session, job=old, reason="submit time differs")
        new = await jobs.register_job(session, registration=_registration(incarnation=1))
    async with sessions() as session:
        current = await job_queries.current_jobs(session, cluster="c1")
    assert current[42].id == new.id != old.id
