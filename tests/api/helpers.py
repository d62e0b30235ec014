"""Helpers of the API tests: GraphQL operations, seeded data, a real uvicorn server."""

from __future__ import annotations

import datetime as dt
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.advice.models import Advice, SchedulerAction
from app.auth import OPERATOR, VIEWER, AuthError, Principal
from app.db import utcnow
from app.evidence.models import Anomaly, Checkpoint
from app.jobs import service as jobs
from app.jobs.models import Attempt, Job

ROOT = Path(__file__).resolve().parents[2]


OPERATIONS = ROOT / "graphql" / "operations"


CLUSTER = "test"


def operation(name: str) -> str:
    """The text of graphql/operations/<name>.graphql."""
    return (OPERATIONS / f"{name}.graphql").read_text()


class FakeAuthenticator:
    """Maps fixed tokens to principals, so role tests need no identity provider."""

    requires_token = True
    PRINCIPALS = {
        "viewer-token": Principal(subject="u-viewer", name="vera", email=None, roles=frozenset({VIEWER})),
        "operator-token": Principal(subject="u-operator", name="otto", email=None, roles=frozenset({VIEWER, OPERATOR})),
    }

    async def verify(self, token: str) -> Principal:
        principal = self.PRINCIPALS.get(token)
        if principal is None:
            raise AuthError(401, "unknown test token")
        return principal


async def run_graphql(
    http: httpx.AsyncClient,
    query: str,
    variables: dict[str, Any] | None = None,
    *,
    token: str | None = None,
    expect_errors: bool = False,
) -> dict[str, Any]:
    """POST one operation to /graphql; returns the whole response body (asserts no errors unless expected)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = await http.post("/graphql", json={"query": query, "variables": variables or {}}, headers=headers)
    body = response.json()
    if not expect_errors:
        assert response.status_code == 200 and not body.get("errors"), body
    return body


@dataclass
class Seeded:
    """Rows a test seeded, by role."""

    jobs: list[Job]
    attempts: list[Attempt]
    advice: list[Advice]


async def seed_job(
    session: AsyncSession,
    *,
    slurm_job_id: int,
    workflow_key: str,
    name: str = "train",
    attempts: int = 1,
    failed: bool = True,
    checkpoints: int = 0,
    anomalies: int = 0,
    advice: bool = False,
    cluster: str = CLUSTER,
) -> tuple[Job, list[Attempt], list[Advice]]:
    """A job registered through the jobs service with `attempts` attempts; evidence and Advice by ORM inserts."""
    job = await jobs.register_job(
        session,
        registration=jobs.JobRegistration(
            cluster=cluster,
            slurm_job_id=slurm_job_id,
            environment="test-env",
            enrolment="ENROLLED",
            enrolment_reason=None,
            workflow_key=workflow_key,
            name=name,
            partition="gpu",
            requested_mode="act",
            effective_mode="observe",
            mode_reason="acknowledgment ceiling is off",
            requeue_eligible=True,
            state="RUNNING",
            policy_wrapper="APS",
            policy_valid=True,
            policy_effective={
                "workflow_id": workflow_key,
                "environment": "test-env",
                "mode": "act",
                "auto_resume_mode": "requeue",
                "max_requeue_times": 2,
                "log_file_paths_shared_across_attempts": False,
                "anomaly_detection_config": {
                    "log_based_timeout_enabled": True,
                    "log_based_timeout_threshold_pretraining": 960,
                    "log_based_timeout_threshold_trainingloop": 840,
                    "straggler_detection_enabled": False,
                },
            },
            policy_warnings=[{"path": "$.APS.extra", "message": "unknown key"}],
        ),
    )
    made: list[Attempt] = []
    advices: list[Advice] = []
    for index in range(attempts):
        attempt = await jobs.create_attempt(
            session,
            job=job,
            attempt_index=index,
            state="RUNNING",
            nodes=[f"node{index}"],
            stdout_path=f"/logs/{slurm_job_id}-{index}.out",
            start_time=utcnow(),
        )
        if failed or index < attempts - 1:
            await jobs.update_attempt(session, attempt=attempt, job=job, state="FAILED", exit_code=1, end_time=utcnow())
        for n in range(checkpoints):
            session.add(
                Checkpoint(
                    attempt_id=attempt.id,
                    event_key=f"ck-{attempt.id}-{n}",
                    kind="saved",
                    framework="megatron",
                    iteration=100 * (n + 1),
                    path=f"/ckpt/iter_{n}",
                )
            )
        for n in range(anomalies):
            session.add(
                Anomaly(
                    attempt_id=attempt.id,
                    event_key=f"an-{attempt.id}-{n}",
                    kind="CRASH",
                    category="CUDA_ERROR",
                    detector="signatures",
                    message="CUDA error",
                    node=f"node{index}",
                    details={"n": n},
                )
            )
        if advice:
            row = Advice(
                attempt_id=attempt.id,
                job_id=job.id,
                cluster=cluster,
                slurm_job_id=slurm_job_id,
                attempt_index=index,
                operation="RESTART",
                exclusions=[f"node{index}"],
                reason="crash",
                rule="retry",
                generation=1,
                mode="observe",
                disposition="PENDING",
                active=True,
            )
            session.add(row)
            await session.flush()
            session.add(
                SchedulerAction(
                    advice_id=row.id,
                    generation=1,
                    step="requeue_hold",
                    idempotency_key=f"idem-{row.id}-1",
                    status="SHADOW",
                    duration_ms=1.5,
                    finished_at=utcnow(),
                )
            )
            advices.append(row)
        made.append(attempt)
    await session.flush()
    return job, made, advices


async def seed_many(
    sessions: async_sessionmaker[AsyncSession], *, count: int, first_job_id: int = 1000, **kwargs: Any
) -> Seeded:
    """`count` jobs (one workflow each) in one transaction."""
    result = Seeded([], [], [])
    async with sessions() as session, session.begin():
        for n in range(count):
            job, attempts, advice = await seed_job(
                session, slurm_job_id=first_job_id + n, workflow_key=f"wf-{n}", **kwargs
            )
            result.jobs.append(job)
            result.attempts.extend(attempts)
            result.advice.extend(advice)
    return result


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class LiveServer:
    """`recovery serve` in its own process on a loopback port."""

    url: str
    process: subprocess.Popen[str]
    log_path: Path

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://", 1) + "/graphql"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def start_server(database_url: str, tmp_path: Path, **env: str) -> LiveServer:
    """Start `python -m app.cli serve` (API only; no worker) and wait for /healthz."""
    port = free_port()
    log_path = tmp_path / f"serve-{port}.log"
    environment = {
        **os.environ,
        "RECOVERY_DATABASE_URL": database_url,
        "RECOVERY_DATA_DIR": str(tmp_path),
        "RECOVERY_BIND": f"127.0.0.1:{port}",
        "RECOVERY_CLUSTER": CLUSTER,
        **env,
    }
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve"],
            cwd=ROOT,
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
    server = LiveServer(
        url=f"http://127.0.0.1:{port}{env.get('RECOVERY_URL_PREFIX', '')}", process=process, log_path=log_path
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            stop_server(server)
            raise RuntimeError(f"recovery serve did not start:\n{server.log()}")
        time.sleep(0.1)


def stop_server(server: LiveServer) -> None:
    if server.process.poll() is None:
        server.process.terminate()
        try:
            server.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait(timeout=10)


def iso(value: dt.datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")
