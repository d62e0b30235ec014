"""Three finished stories for the dashboard and API tests: a recovered, a stopped and an observe-only workflow."""

from __future__ import annotations

import datetime as dt
from typing import Any

from app.advice.models import Advice, SchedulerAction
from app.evidence.models import Anomaly, Checkpoint
from app.jobs import service as jobs
from tests.factories import CLUSTER, T0, dashboard_registration

RECOVERED, STOPPED, OBSERVED = 5101, 5201, 5301


def _at(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


async def _failed_attempt(session: Any, job: Any, *, nodes: list[str], anomaly: dict[str, Any] | None) -> Any:
    a0 = await jobs.create_attempt(
        session, job=job, attempt_index=0, state="RUNNING", nodes=nodes, start_time=_at(1), produced_at=_at(1)
    )
    if anomaly:
        session.add(
            Anomaly(
                attempt_id=a0.id,
                event_key=f"story-{job.slurm_job_id}",
                detector="signatures",
                log_path=f"/logs/{job.slurm_job_id}-0.err",
                source_time=_at(20),
                detected_at=_at(20),
                **anomaly,
            )
        )
    await jobs.update_attempt(
        session, attempt=a0, job=job, state="FAILED", exit_code=1, end_time=_at(21), produced_at=_at(21)
    )
    return a0


def _advice(job: Any, a0: Any, **values: Any) -> Advice:
    base = {
        "attempt_id": a0.id,
        "job_id": job.id,
        "cluster": CLUSTER,
        "slurm_job_id": job.slurm_job_id,
        "attempt_index": 0,
        "exclusions": [],
        "generation": 1,
        "active": False,
        "disposition": "CONVERGED",
        "created_at": _at(22),
        "updated_at": _at(22),
    }
    return Advice(**{**base, **values})


async def seed_stories(sessions: Any) -> dict[str, int]:
    """Workflows wf-recovered (5101), wf-stopped (5201) and wf-observed (5301), each one decided failure."""
    async with sessions() as session, session.begin():
        job = await jobs.register_job(
            session, registration=dashboard_registration(RECOVERED, workflow_key="wf-recovered"), produced_at=T0
        )
        a0 = await _failed_attempt(
            session,
            job,
            nodes=["gpu-b01", "gpu-b02"],
            anomaly={"kind": "CRASH", "category": "xid", "node": "gpu-b02", "xid": 79, "line_number": 812},
        )
        advice = _advice(
            job,
            a0,
            operation="RESTART",
            exclusions=["gpu-b02"],
            reason="attempt 0 crashed: restart as attempt 1 excluding gpu-b02; retry 1 of 2.",
            rule="restart_allowed",
            mode="act",
        )
        session.add(advice)
        await session.flush()
        session.add(
            SchedulerAction(
                advice_id=advice.id,
                generation=1,
                step="requeue_hold",
                idempotency_key=f"story-{advice.id}",
                status="SUCCEEDED",
                command=f"scontrol requeuehold {RECOVERED}",
                started_at=_at(22),
                finished_at=_at(22),
                duration_ms=120.0,
            )
        )
        a1 = await jobs.create_attempt(session, job=job, attempt_index=1, state="PENDING", produced_at=_at(23))
        await jobs.update_attempt(
            session, attempt=a1, job=job, state="RUNNING", nodes=["gpu-b03"], start_time=_at(25), produced_at=_at(25)
        )
        session.add(
            Checkpoint(
                attempt_id=a1.id,
                event_key=f"story-load-{RECOVERED}",
                kind="loaded",
                iteration=1200,
                path="/ckpt/iter_0001200",
                source_time=_at(26),
            )
        )

        job = await jobs.register_job(
            session, registration=dashboard_registration(STOPPED, workflow_key="wf-stopped"), produced_at=T0
        )
        a0 = await _failed_attempt(session, job, nodes=["gpu-c01"], anomaly=None)
        session.add(
            _advice(
                job,
                a0,
                operation="TERMINATE",
                reason="attempt 0 failed: the retry limit is reached, so it is not restarted.",
                rule="retry_limit",
                mode="act",
            )
        )

        job = await jobs.register_job(
            session, registration=dashboard_registration(OBSERVED, workflow_key="wf-observed"), produced_at=T0
        )
        a0 = await _failed_attempt(
            session, job, nodes=["gpu-d01"], anomaly={"kind": "NO_PROGRESS", "category": "hang", "node": None}
        )
        advice = _advice(
            job,
            a0,
            operation="RESTART",
            reason="attempt 0 hung: restart as attempt 1; retry 1 of 2.",
            rule="restart_allowed",
            mode="observe",
            disposition="PENDING",
            disposition_reason="NOT_AUTHORIZED",
            active=True,
        )
        session.add(advice)
        await session.flush()
        session.add(
            SchedulerAction(
                advice_id=advice.id,
                generation=1,
                step="requeue_hold",
                idempotency_key=f"story-{advice.id}",
                status="SHADOW",
                command=f"scontrol requeuehold {OBSERVED}",
                started_at=_at(22),
                finished_at=_at(22),
                duration_ms=0.0,
            )
        )
        await session.flush()
        return {"observed_advice": advice.id}
