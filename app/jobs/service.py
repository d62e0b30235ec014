"""Write side of workflows, jobs and attempts: every change is an audit event and a change-feed entry."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

from sqlalchemy import Table, bindparam, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.audit import service as audit
from app.domain.admission.adoption import adopted_ended_reason, adoption_reason
from app.domain.admission.mode import ENROLLED
from app.domain.control import states
from app.domain.control.identity import attempt_uuid
from app.feed import service as feed
from app.infra.db import utcnow
from app.infra.sql import insert_rows
from app.jobs.models import Attempt, Job, Policy, Workflow

# session.info key of the workflow summaries queued while summaries_batched() is open, by workflow id
_SUMMARIES = "recovery.jobs.summaries"

ATTEMPT_FIELDS = (
    "state",
    "state_reason",
    "exit_code",
    "exit_signal",
    "nodes",
    "stdout_path",
    "stderr_path",
    "requeue_eligible",
    "held",
    "excluded_nodes",
    "tasks_per_node",
    "start_time",
    "end_time",
    "ended_reason",
)


def derived_workflow_key(slurm_job_id: int) -> str:
    """The workflow of a job whose policy names none (SPEC §2)."""
    return f"job-{slurm_job_id}"


async def ensure_workflow(session: AsyncSession, *, cluster: str, environment: str, workflow_key: str) -> Workflow:
    """Find or create the workflow (cluster, key); new ones are announced on the change feed."""
    found = await session.scalar(
        select(Workflow).where(Workflow.cluster == cluster, Workflow.workflow_key == workflow_key)
    )
    if found is not None:
        return found
    workflow = Workflow(cluster=cluster, environment=environment, workflow_key=workflow_key)
    session.add(workflow)
    await session.flush()
    await _announce_workflow(session, workflow_id=workflow.id, cluster=cluster, workflow_key=workflow_key)
    return workflow


@dataclass
class JobRegistration:
    """What the observer knows about a job the first time it sees it."""

    cluster: str
    slurm_job_id: int
    environment: str
    enrolment: str
    enrolment_reason: str | None
    workflow_key: str | None = None
    name: str | None = None
    user: str | None = None
    user_id: int | None = None  # the numeric uid the job runs as: its files are read with this user's rights
    group_id: int | None = None
    partition: str | None = None
    submit_time: dt.datetime | None = None
    comment: str | None = None
    requested_mode: str | None = None
    registered_mode: str = "observe"
    mode_reason: str | None = None
    requeue_eligible: bool | None = None
    state: str | None = None
    restart_count: int = 0
    incarnation: int = 0
    policy_wrapper: str | None = None
    policy_valid: bool = False
    policy_effective: dict[str, Any] | None = None
    policy_warnings: list[Any] = field(default_factory=list)
    policy_errors: list[Any] = field(default_factory=list)
    shared_log_paths: bool = False
    array_job_id: int | None = None
    array_task_id: int | None = None


# A heterogeneous job's components share one allocation: requeueing or holding one component
# alone is not what Slurm offers (scontrol acts on the whole het job, whose leader id names it),
# so Recovery refuses to enrol them rather than act on a part it cannot isolate.
HETEROGENEOUS_JOB = "HETEROGENEOUS_JOB"


def registration_event(enrolment: str) -> str:
    """The audit event of a first sighting: enrolled, refused (a kind of job Recovery cannot act on) or rejected."""
    if enrolment == ENROLLED:
        return "job.registered"
    if enrolment == HETEROGENEOUS_JOB:
        return "job.refused"
    return "policy.rejected"


async def register_job(
    session: AsyncSession, *, registration: JobRegistration, produced_at: dt.datetime | None = None
) -> Job:
    """Create a job record (enrolled or not, with the reason) and its parsed policy."""
    r = registration
    workflow: Workflow | None = None
    if r.enrolment == ENROLLED:
        key = r.workflow_key or derived_workflow_key(r.slurm_job_id)
        workflow = await ensure_workflow(session, cluster=r.cluster, environment=r.environment, workflow_key=key)
    job = Job(
        cluster=r.cluster,
        slurm_job_id=r.slurm_job_id,
        incarnation=r.incarnation,
        workflow_id=workflow.id if workflow else None,
        name=r.name,
        user=r.user,
        user_id=r.user_id,
        group_id=r.group_id,
        partition=r.partition,
        submit_time=r.submit_time,
        comment=r.comment,
        enrolment=r.enrolment,
        enrolment_reason=r.enrolment_reason,
        requested_mode=r.requested_mode,
        registered_mode=r.registered_mode,
        mode_reason=r.mode_reason,
        requeue_eligible=r.requeue_eligible,
        state=r.state,
        restart_count=r.restart_count,
        shared_log_paths=r.shared_log_paths,
        array_job_id=r.array_job_id,
        array_task_id=r.array_task_id,
        last_seen_at=utcnow(),
    )
    session.add(job)
    await session.flush()
    session.add(
        Policy(
            job_id=job.id,
            wrapper=r.policy_wrapper,
            valid=r.policy_valid,
            effective=r.policy_effective,
            warnings=r.policy_warnings,
            errors=r.policy_errors,
        )
    )
    await audit.record(
        session,
        **_registration_audit(r, workflow.workflow_key if workflow else None),
        workflow_id=job.workflow_id,
        produced_at=produced_at,
    )
    await feed.announce(session, topic="job", entity_id=job.id, about=job, payload={"enrolment": r.enrolment})
    return job


def _registration_audit(r: JobRegistration, workflow_key: str | None) -> dict[str, Any]:
    """The audit event of a registration (its workflow id aside)."""
    enrolled = r.enrolment == ENROLLED
    return {
        "component": "job_manager",
        "event_type": registration_event(r.enrolment),
        "level": "INFO" if enrolled else "WARNING",
        "message": (
            f"job {r.slurm_job_id} enrolled in workflow {workflow_key} ({r.registered_mode})"
            if enrolled and workflow_key
            else f"job {r.slurm_job_id} not enrolled: {r.enrolment_reason}"
        ),
        "payload": {
            "enrolment": r.enrolment,
            "reason": r.enrolment_reason,
            "registeredMode": r.registered_mode,
            "modeReason": r.mode_reason,
            "partition": r.partition,
            "incarnation": r.incarnation,
            "policyErrors": r.policy_errors,
            "policyWarnings": r.policy_warnings,
            "arrayJobId": r.array_job_id,
            "arrayTaskId": r.array_task_id,
        },
        "cluster": r.cluster,
        "slurm_job_id": r.slurm_job_id,
    }


@dataclass
class NewAttempt:
    """The first attempt of a job registered by register_jobs (what create_attempt is given)."""

    attempt_index: int
    state: str
    values: dict[str, Any] = field(default_factory=dict)  # ATTEMPT_FIELDS


async def register_jobs(
    session: AsyncSession,
    *,
    items: Sequence[tuple[JobRegistration, NewAttempt | None]],
    watching_since: dt.datetime | None = None,
) -> int:
    """register_job, then create_attempt(check_adoption=True) for the enrolled, for many jobs at once.

    A few multi-row statements per table in the caller's transaction; the rows, audit events and
    change-feed entries (in the same order) are those of registering the jobs one by one.
    """
    if not items:
        return 0
    for _, new_attempt in items:
        if new_attempt is not None and set(new_attempt.values) - set(ATTEMPT_FIELDS):
            raise TypeError(f"unknown attempt fields: {sorted(set(new_attempt.values) - set(ATTEMPT_FIELDS))}")
    now = utcnow()
    async with audit.batched(session), summaries_batched(session):
        workflows, created = await _ensure_workflows(session, registrations=[r for r, _ in items], now=now)
        keys = [_workflow_key(r) for r, _ in items]
        job_rows = [
            {
                "cluster": r.cluster,
                "slurm_job_id": r.slurm_job_id,
                "incarnation": r.incarnation,
                "workflow_id": workflows[key] if key else None,
                "name": r.name,
                "user": r.user,
                "user_id": r.user_id,
                "group_id": r.group_id,
                "partition": r.partition,
                "submit_time": r.submit_time,
                "comment": r.comment,
                "enrolment": r.enrolment,
                "enrolment_reason": r.enrolment_reason,
                "requested_mode": r.requested_mode,
                "registered_mode": r.registered_mode,
                "mode_reason": r.mode_reason,
                "requeue_eligible": r.requeue_eligible,
                "state": new_attempt.state if key and new_attempt else r.state,
                "restart_count": r.restart_count,
                "shared_log_paths": r.shared_log_paths,
                "array_job_id": r.array_job_id,
                "array_task_id": r.array_task_id,
                "last_seen_at": now,
                "created_at": now,
                "updated_at": now,
            }
            for (r, new_attempt), key in zip(items, keys, strict=True)
        ]
        job_ids = await insert_rows(session, Job, job_rows)
        await insert_rows(
            session,
            Policy,
            [
                {
                    "job_id": job_id,
                    "wrapper": r.policy_wrapper,
                    "valid": r.policy_valid,
                    "effective": r.policy_effective,
                    "warnings": r.policy_warnings,
                    "errors": r.policy_errors,
                    "created_at": now,
                }
                for (r, _), job_id in zip(items, job_ids, strict=True)
            ],
        )
        attempts: list[dict[str, Any] | None] = []
        reasons: dict[int, str] = {}  # adopted attempts by job id: the reason in full (the row keeps 2000 chars)
        for (r, new_attempt), key, job_id in zip(items, keys, job_ids, strict=True):
            if not key or new_attempt is None:
                attempts.append(None)
                continue
            row: dict[str, Any] = {name: None for name in ATTEMPT_FIELDS}
            row |= {"nodes": [], "held": False, "excluded_nodes": []}
            row |= new_attempt.values
            active = new_attempt.state in states.ACTIVE
            row |= {
                "state": new_attempt.state,
                "first_seen_running_at": now if active else None,
                "uuid": _attempt_uuid(r.cluster, r.incarnation, r.slurm_job_id, new_attempt.attempt_index),
                "job_id": job_id,
                "workflow_id": workflows[key],
                "cluster": r.cluster,
                "slurm_job_id": r.slurm_job_id,
                "attempt_index": new_attempt.attempt_index,
                "adopted_at": None,
                "adopted_reason": None,
                "created_at": now,
                "updated_at": now,
            }
            reason = adoption_reason(
                ended=row["state"] in states.ENDED,
                state=row["state"],
                first_seen_running_at=row["first_seen_running_at"],
                end_time=row["end_time"],
                watching_since=watching_since,
            )
            if reason is not None:
                row["adopted_at"], row["adopted_reason"] = now, reason[:2000]
                row["ended_reason"] = adopted_ended_reason(row["ended_reason"], reason[:2000])
                reasons[job_id] = reason
            attempts.append(row)
        rows = [row for row in attempts if row is not None]
        if rows:
            attempt_ids = await insert_rows(session, Attempt, rows)
            for inserted, attempt_id in zip(rows, attempt_ids, strict=True):
                inserted["id"] = attempt_id
        announced: set[tuple[str, str]] = set()
        for (r, _), key, job_id, first in zip(items, keys, job_ids, attempts, strict=True):
            workflow_id = workflows[key] if key else None
            if key in created and key not in announced:
                announced.add(key)
                await _announce_workflow(session, workflow_id=created[key], cluster=key[0], workflow_key=key[1])
            await audit.record(session, **_registration_audit(r, key[1] if key else None), workflow_id=workflow_id)
            await feed.append(
                session,
                topic="job",
                entity_id=job_id,
                cluster=r.cluster,
                workflow_id=workflow_id,
                slurm_job_id=r.slurm_job_id,
                payload={"enrolment": r.enrolment},
            )
            if first is None or workflow_id is None:
                continue
            _queue_summary(session, workflow_id=workflow_id, state=first["state"], job_name=r.name, new_attempt=True)
            attempt = SimpleNamespace(**first)
            await audit.record(session, **_attempt_audit(attempt))
            await _announce_row(session, attempt, {"state": attempt.state, "new": True})
            if job_id in reasons:
                await audit.record(
                    session, **_adoption_audit(attempt, reasons[job_id], watching_since), workflow_id=workflow_id
                )
                await _announce_row(session, attempt, {"state": attempt.state, "adopted": True})
    return len(items)


def _workflow_key(r: JobRegistration) -> tuple[str, str] | None:
    """(cluster, workflow key) of an enrolled registration; None for the others (they join no workflow)."""
    if r.enrolment != ENROLLED:
        return None
    return r.cluster, r.workflow_key or derived_workflow_key(r.slurm_job_id)


async def _ensure_workflows(
    session: AsyncSession, *, registrations: Sequence[JobRegistration], now: dt.datetime
) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
    """ensure_workflow for many: (every workflow id by (cluster, key), the ones created now), in two statements.

    Reads ids only: Workflow rows in the session would go stale when register_jobs moves their summaries.
    """
    wanted: dict[tuple[str, str], str] = {}
    for r in registrations:
        key = _workflow_key(r)
        if key is not None:
            wanted.setdefault(key, r.environment)
    if not wanted:
        return {}, {}
    found = await session.execute(
        select(Workflow.cluster, Workflow.workflow_key, Workflow.id).where(
            Workflow.cluster.in_({cluster for cluster, _ in wanted}),
            Workflow.workflow_key.in_({key for _, key in wanted}),
        )
    )
    workflows = {(cluster, key): workflow_id for cluster, key, workflow_id in found.all()}
    missing = [key for key in wanted if key not in workflows]
    ids = await insert_rows(
        session,
        Workflow,
        [
            {
                "cluster": cluster,
                "environment": wanted[(cluster, key)],
                "workflow_key": key,
                "latest_state": None,
                "latest_job_name": None,
                "attempt_count": 0,
                "failed_attempt_count": 0,
                "created_at": now,
                "updated_at": now,
            }
            for cluster, key in missing
        ],
    )
    created = dict(zip(missing, ids, strict=True))
    return workflows | created, created


async def _announce_workflow(session: AsyncSession, *, workflow_id: int, cluster: str, workflow_key: str) -> None:
    await feed.append(
        session,
        topic="workflow",
        entity_id=workflow_id,
        cluster=cluster,
        workflow_id=workflow_id,
        payload={"workflowKey": workflow_key},
    )


async def _announce_row(session: AsyncSession, attempt: Any, payload: dict[str, Any]) -> None:
    await feed.append(
        session,
        topic="attempt",
        entity_id=attempt.id,
        cluster=attempt.cluster,
        workflow_id=attempt.workflow_id,
        slurm_job_id=attempt.slurm_job_id,
        attempt_index=attempt.attempt_index,
        payload=payload,
    )


async def set_array_task(
    session: AsyncSession, *, job: Job, array_job_id: int | None, array_task_id: int | None
) -> None:
    """Record which array task the job record is (an array's pending record becomes its last task when it starts)."""
    if (job.array_job_id, job.array_task_id) == (array_job_id, array_task_id):
        return
    job.array_job_id, job.array_task_id = array_job_id, array_task_id
    job.updated_at = utcnow()
    await feed.announce(session, topic="job", entity_id=job.id, about=job, payload={"arrayTaskId": array_task_id})


async def note_seen_again(session: AsyncSession, *, job: Job, at: dt.datetime) -> None:
    """A refused job seen again (it changed in squeue): its "last seen" moves on."""
    job.last_seen_at = at


async def update_from_squeue(
    session: AsyncSession,
    *,
    job: Job,
    submit_time: dt.datetime | None,
    restart_count: int,
    requeue_eligible: bool,
    user_id: int | None,
    group_id: int | None,
) -> None:
    """Keep an enrolled job's submit time, restart count and requeue flag as squeue shows them now."""
    if job.submit_time != submit_time or job.restart_count != restart_count:
        job.submit_time, job.restart_count = submit_time, restart_count
        job.updated_at = utcnow()
    if job.requeue_eligible != requeue_eligible:
        job.requeue_eligible = requeue_eligible
    if job.user_id is None and user_id is not None:  # a row from before 0012: learn whose files these are
        job.user_id, job.group_id = user_id, group_id


async def retire_job(session: AsyncSession, *, job: Job, reason: str) -> None:
    """Mark a job record as superseded (its Slurm job id was reused by a new submission)."""
    job.retired_at = utcnow()
    job.updated_at = utcnow()
    await audit.record(
        session,
        component="job_manager",
        event_type="job.id_reused",
        level="WARNING",
        message=f"Slurm job id {job.slurm_job_id} now belongs to a new submission: {reason}",
        payload={"reason": reason, "incarnation": job.incarnation},
        cluster=job.cluster,
        slurm_job_id=job.slurm_job_id,
        workflow_id=job.workflow_id,
    )
    await feed.announce(session, topic="job", entity_id=job.id, about=job, payload={"retired": True})


def incarnation_attempt_uuid(job: Job, attempt_index: int) -> str:
    """SPEC §3's deterministic UUID; a reused job id (incarnation > 0) gets its own namespace."""
    return _attempt_uuid(job.cluster, job.incarnation, job.slurm_job_id, attempt_index)


def _attempt_uuid(cluster: str, incarnation: int, slurm_job_id: int, attempt_index: int) -> str:
    namespace = cluster if incarnation == 0 else f"{cluster}#{incarnation}"
    return attempt_uuid(namespace, slurm_job_id, attempt_index)


async def create_attempt(
    session: AsyncSession,
    *,
    job: Job,
    attempt_index: int,
    state: str,
    produced_at: dt.datetime | None = None,
    check_adoption: bool = False,
    watching_since: dt.datetime | None = None,
    **values: Any,
) -> Attempt:
    """Create the attempt record for a new execution (attempt index = Slurm's restart count).

    The observer passes ``check_adoption``: an attempt first seen already ended outside its watch is adopted.
    """
    unknown = set(values) - set(ATTEMPT_FIELDS)
    if unknown:
        raise TypeError(f"unknown attempt fields: {sorted(unknown)}")
    attempt = Attempt(
        first_seen_running_at=utcnow() if state in states.ACTIVE else None,
        uuid=incarnation_attempt_uuid(job, attempt_index),
        job_id=job.id,
        workflow_id=job.workflow_id,
        cluster=job.cluster,
        slurm_job_id=job.slurm_job_id,
        attempt_index=attempt_index,
        state=state,
        **values,
    )
    session.add(attempt)
    await session.flush()
    await _touch_workflow(session, attempt=attempt, job=job, new_attempt=True)
    await audit.record(session, **_attempt_audit(attempt), produced_at=produced_at)
    await _announce_attempt(session, attempt, {"state": state, "new": True})
    if check_adoption:
        await _adopt_if_unobserved(session, attempt=attempt, job=job, watching_since=watching_since)
    return attempt


async def _adopt_if_unobserved(
    session: AsyncSession, *, attempt: Attempt, job: Job | None, watching_since: dt.datetime | None
) -> None:
    """Apply the adoption rule (domain/admission/adoption.py): an end we did not observe is history, with a reason."""
    if attempt.adopted_at is not None:
        return
    reason = adoption_reason(
        ended=attempt.state in states.ENDED,
        state=attempt.state,
        first_seen_running_at=attempt.first_seen_running_at,
        end_time=attempt.end_time,
        watching_since=watching_since,
    )
    if reason is None:
        return
    attempt.adopted_at = utcnow()
    attempt.adopted_reason = reason[:2000]
    attempt.ended_reason = adopted_ended_reason(attempt.ended_reason, attempt.adopted_reason)
    await audit.record(
        session,
        **_adoption_audit(attempt, reason, watching_since),
        workflow_id=job.workflow_id if job is not None else attempt.workflow_id,
    )
    await _announce_attempt(session, attempt, {"state": attempt.state, "adopted": True})


def _attempt_audit(attempt: Any) -> dict[str, Any]:
    """The audit event of a new attempt (an Attempt row or a namespace with its fields)."""
    return {
        "component": "job_manager",
        "event_type": "attempt.registered",
        "message": f"attempt {attempt.slurm_job_id}/{attempt.attempt_index} registered ({attempt.state})",
        "payload": {
            "state": attempt.state,
            "nodes": attempt.nodes,
            "stdout": attempt.stdout_path,
            "stderr": attempt.stderr_path,
            "uuid": attempt.uuid,
        },
        "cluster": attempt.cluster,
        "slurm_job_id": attempt.slurm_job_id,
        "attempt_index": attempt.attempt_index,
        "workflow_id": attempt.workflow_id,
    }


def _adoption_audit(attempt: Any, reason: str, watching_since: dt.datetime | None) -> dict[str, Any]:
    """The audit event of an adopted attempt (its workflow id aside)."""
    return {
        "component": "job_manager",
        "event_type": "job.adopted",
        "level": "WARNING" if attempt.state in states.FAILED else "INFO",
        "message": f"attempt {attempt.slurm_job_id}/{attempt.attempt_index} recorded as history, no Advice: {reason}",
        "payload": {
            "reason": reason,
            "state": attempt.state,
            "endTime": attempt.end_time.isoformat() if attempt.end_time else None,
            "firstSeenRunningAt": attempt.first_seen_running_at.isoformat() if attempt.first_seen_running_at else None,
            "watchingSince": watching_since.isoformat() if watching_since else None,
        },
        "cluster": attempt.cluster,
        "slurm_job_id": attempt.slurm_job_id,
        "attempt_index": attempt.attempt_index,
    }


async def update_attempt(
    session: AsyncSession,
    *,
    attempt: Attempt,
    job: Job | None = None,
    produced_at: dt.datetime | None = None,
    check_adoption: bool = False,
    **values: Any,
) -> list[str]:
    """Apply observed values; a state change is an audit event. Returns the names of changed fields.

    With ``check_adoption`` (the observer), an attempt that ended before we first saw it live is adopted.
    """
    unknown = set(values) - set(ATTEMPT_FIELDS)
    if unknown:
        raise TypeError(f"unknown attempt fields: {sorted(unknown)}")
    changed = [name for name, value in values.items() if getattr(attempt, name) != value]
    if not changed:
        return []
    if attempt.first_seen_running_at is None and values.get("state") in states.ACTIVE:
        attempt.first_seen_running_at = utcnow()
    previous_state = attempt.state
    for name in changed:
        setattr(attempt, name, values[name])
    if attempt.adopted_reason is not None and "ended_reason" in changed:  # an adopted attempt keeps saying so
        attempt.ended_reason = adopted_ended_reason(attempt.ended_reason, attempt.adopted_reason)
    attempt.updated_at = utcnow()
    if "state" in changed:
        failed = attempt.state in states.FAILED
        detail = ""
        if attempt.exit_code is not None and attempt.state not in states.ACTIVE:
            detail = f", exit code {attempt.exit_code}" + (
                f" signal {attempt.exit_signal}" if attempt.exit_signal else ""
            )
        await audit.record(
            session,
            component="job_manager",
            event_type="attempt.state_changed",
            level="WARNING" if failed else "INFO",
            message=f"attempt {attempt.slurm_job_id}/{attempt.attempt_index}: {previous_state} -> "
            f"{attempt.state}{detail}"
            + (f" ({attempt.state_reason})" if attempt.state_reason and attempt.state_reason != "None" else ""),
            payload={
                "from": previous_state,
                "to": attempt.state,
                "exitCode": attempt.exit_code,
                "signal": attempt.exit_signal,
                "reason": attempt.state_reason,
                "nodes": attempt.nodes,
            },
            cluster=attempt.cluster,
            slurm_job_id=attempt.slurm_job_id,
            attempt_index=attempt.attempt_index,
            workflow_id=attempt.workflow_id,
            produced_at=produced_at,
        )
        if job is not None:
            await _touch_workflow(
                session,
                attempt=attempt,
                job=job,
                new_attempt=False,
                became_failed=failed and previous_state not in states.FAILED,
            )
    await _announce_attempt(session, attempt, {"changed": changed, "state": attempt.state})
    if check_adoption and "state" in changed and attempt.first_seen_running_at is not None:
        # Only an end before the first live sighting counts here; an attempt we saw live and lost sight
        # of (worker down, Slurm away) ended after we saw it, and that end is ours to decide.
        await _adopt_if_unobserved(session, attempt=attempt, job=job, watching_since=attempt.first_seen_running_at)
    return changed


async def _touch_workflow(
    session: AsyncSession, *, attempt: Attempt, job: Job, new_attempt: bool, became_failed: bool = False
) -> None:
    """Keep the workflow's denormalised summary (latest state, counts) in step with its attempts."""
    job.state = attempt.state
    job.updated_at = utcnow()
    if job.workflow_id is None:
        return
    if _SUMMARIES in session.info:
        _queue_summary(
            session,
            workflow_id=job.workflow_id,
            state=attempt.state,
            job_name=job.name,
            new_attempt=new_attempt,
            became_failed=became_failed,
        )
        return
    workflow = await session.get(Workflow, job.workflow_id)
    if workflow is None:
        return
    workflow.latest_state = attempt.state
    workflow.latest_job_name = job.name
    workflow.updated_at = utcnow()
    if new_attempt:
        workflow.attempt_count += 1
    if became_failed:
        workflow.failed_attempt_count += 1


@contextlib.asynccontextmanager
async def summaries_batched(session: AsyncSession) -> AsyncIterator[None]:
    """Queue the block's workflow summary changes; write them at its end in one UPDATE (executemany) for all.

    The Workflow rows are neither loaded nor refreshed, so a summary read inside the block is the one
    from before it. Nested blocks join the outer one.
    """
    if _SUMMARIES in session.info:
        yield
        return
    queued: dict[int, dict[str, Any]] = {}
    session.info[_SUMMARIES] = queued
    try:
        yield
        if queued:
            table = cast(Table, Workflow.__table__)
            await session.execute(
                update(table)
                .where(table.c.id == bindparam("wid"))
                .values(
                    attempt_count=table.c.attempt_count + bindparam("added"),
                    failed_attempt_count=table.c.failed_attempt_count + bindparam("failed"),
                    latest_state=bindparam("latest_state"),
                    latest_job_name=bindparam("latest_job_name"),
                    updated_at=bindparam("updated_at"),
                ),
                list(queued.values()),
            )
    finally:
        session.info.pop(_SUMMARIES, None)


def _queue_summary(
    session: AsyncSession,
    *,
    workflow_id: int,
    state: str,
    job_name: str | None,
    new_attempt: bool,
    became_failed: bool = False,
) -> None:
    """What _touch_workflow does to a workflow row, queued for summaries_batched (the last state and name win)."""
    summary = session.info[_SUMMARIES].setdefault(workflow_id, {"wid": workflow_id, "added": 0, "failed": 0})
    summary["added"] += int(new_attempt)
    summary["failed"] += int(became_failed)
    summary |= {"latest_state": state, "latest_job_name": job_name, "updated_at": utcnow()}


async def _announce_attempt(session: AsyncSession, attempt: Attempt, payload: dict[str, Any]) -> None:
    await feed.announce(session, topic="attempt", entity_id=attempt.id, about=attempt, payload=payload)


async def note_first_progress(session: AsyncSession, *, attempt_id: int, at: dt.datetime | None) -> None:
    """Keep the time of the attempt's first progress marker (later markers never move it)."""
    if at is None:
        return
    await session.execute(
        update(Attempt)
        .where(Attempt.id == attempt_id, Attempt.first_progress_at.is_(None))
        .values(first_progress_at=at)
        .execution_options(synchronize_session=False)
    )
