"""The adoption rule on the real lab: an installation acts only on attempt ends it observed (admission/adoption.py).

* A second, empty installation started while jobs that the first one stopped are still listed by
  Slurm (MinJobAge) records them as history (`job.adopted`) and takes no scheduler action; the attempt's
  ended reason, its story and the API say "ended before Recovery was watching; not acted on".
* A database restored from a backup taken before the job was stopped by the retry limit requeues
  nothing: the attempt it never saw fail is adopted, the one it saw running converges without a
  command because Slurm's restart count shows it was already restarted.

Both on SQLite (a file copy via SQLite's backup API) and PostgreSQL (pg_dump | psql).
"""

from __future__ import annotations

import sqlite3
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.engine import make_url

from app.advice.stories import stories_of_jobs
from app.audit.models import AuditEvent
from app.domain.admission.adoption import NOT_ACTED_ON
from app.infra.config import Settings
from app.infra.context import AppContext
from app.infra.db import create_engine, session_factory
from app.infra.migrate import upgrade
from app.main import create_app
from tests.e2e.harness import (
    advice_done,
    advice_list,
    attempts,
    batch_script,
    eventually,
    lab_context,
    milestones,
    policy_comment,
    running_worker,
    unique_environment,
)
from tests.plugins import require
from tests.plugins.database import create_postgres_database, drop_postgres_database
from tests.plugins.slurm_lab import SlurmLab
from worker.runner import WorkerRunner
from worker.service import Service

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

# Every attempt runs a few seconds (so the worker sees it running) and fails.
FAILING = "echo attempt ${SLURM_RESTART_COUNT:-0}; sleep 4; exit 1\n"


class Installation:
    """One database of one backend, opened and closed by the test (several per test)."""

    def __init__(self, backend: str, tmp: Path) -> None:
        self.backend, self.tmp, self.opened = backend, tmp, []  # type: ignore[var-annotated]

    async def new(self, environment: str, url: str | None = None) -> AppContext:
        if url is None:
            if self.backend == "sqlite":
                url = f"sqlite+aiosqlite:///{self.tmp}/{uuid.uuid4().hex[:8]}.db"
            else:
                try:
                    url = await create_postgres_database()
                except Exception as exc:
                    require("PostgreSQL", str(exc))
        engine = create_engine(url)
        await upgrade(engine)
        data_dir = self.tmp / f"data-{uuid.uuid4().hex[:6]}"
        settings = Settings.build(database_url=url, data_dir=str(data_dir), cluster="lab", environment=environment)
        ctx = lab_context(AppContext(settings=settings, engine=engine, sessions=session_factory(engine)), environment)
        self.opened.append(ctx)
        return ctx

    async def backup(self, ctx: AppContext) -> str:
        """A consistent copy of the database as it is now; returns the copy's URL."""
        url = ctx.settings.database_url
        if self.backend == "sqlite":
            source = make_url(url).database
            target = self.tmp / f"backup-{uuid.uuid4().hex[:6]}.db"
            with sqlite3.connect(str(source)) as src, sqlite3.connect(str(target)) as dst:
                src.backup(dst)
            return f"sqlite+aiosqlite:///{target}"
        copy = await create_postgres_database()
        plain = url.replace("postgresql+asyncpg://", "postgresql://")
        destination = copy.replace("postgresql+asyncpg://", "postgresql://")
        dump = subprocess.run(["pg_dump", "--no-owner", plain], check=True, capture_output=True)
        subprocess.run(
            ["psql", "-q", "-v", "ON_ERROR_STOP=1", destination], input=dump.stdout, check=True, capture_output=True
        )
        return copy

    async def close(self) -> None:
        for ctx in self.opened:
            await ctx.engine.dispose()
            if self.backend == "postgres":
                await drop_postgres_database(ctx.settings.database_url)


@pytest.fixture(params=["sqlite", "postgres"])
async def installations(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Installation]:
    made = Installation(request.param, tmp_path)
    try:
        yield made
    finally:
        await made.close()


async def events(ctx: AppContext, job_id: int, event_type: str) -> list[AuditEvent]:
    async with ctx.sessions() as session:
        query = select(AuditEvent).where(AuditEvent.slurm_job_id == job_id, AuditEvent.event_type == event_type)
        return list((await session.scalars(query)).all())


async def test_a_second_empty_installation_adopts_what_the_first_stopped(
    installations: Installation, slurm_lab: SlurmLab
) -> None:
    environment = unique_environment()
    first = await installations.new(environment)
    async with running_worker(first, slurm_lab):
        job_id = slurm_lab.submit(batch_script(policy_comment(environment, max_requeue_times=0), FAILING))
        stopped = await eventually(lambda: advice_done(first, job_id, 0), what="the first installation's decision")
    assert (stopped.operation, stopped.rule) == ("TERMINATE", "retry_limit"), stopped.reason
    assert slurm_lab.state(job_id) == "FAILED"  # still listed by Slurm (MinJobAge)

    second = await installations.new(environment)
    async with running_worker(second, slurm_lab) as runner:
        [adopted] = await eventually(lambda: events(second, job_id, "job.adopted"), what="job.adopted")
        await _more_ticks(runner, 5)
    assert "first look" in adopted.payload["reason"]
    [attempt] = await attempts(second, job_id)
    assert attempt.state == "FAILED" and attempt.adopted_at is not None and attempt.first_seen_running_at is None
    # where users look: the ended reason (REST, GraphQL, dashboard) and the story say it was not acted on
    assert (attempt.ended_reason or "").startswith(NOT_ACTED_ON) and "first look" in (attempt.ended_reason or "")
    async with second.sessions() as session:
        [told] = (await stories_of_jobs(session, job_ids=[attempt.job_id]))[attempt.job_id]
    assert NOT_ACTED_ON in told.story.sentence, told.story.sentence
    shown = lab_context(second, environment, dev_no_auth=True)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(shown.settings, ctx=shown)), base_url="http://127.0.0.1"
    ) as http:
        rest = (await http.get(f"/v1/jobs/by-scheduler-id/{job_id}")).json()
    assert rest["attempts"][0]["endedReason"].startswith(NOT_ACTED_ON)
    assert await advice_list(second, job_id) == []
    assert await milestones(second, job_id) == []
    assert slurm_lab.scontrol_show(job_id)["Restarts"] == "0"


async def test_a_restored_backup_requeues_nothing_the_limit_stopped(
    installations: Installation, slurm_lab: SlurmLab
) -> None:
    environment = unique_environment()
    live = await installations.new(environment)
    async with running_worker(live, slurm_lab):
        job_id = slurm_lab.submit(batch_script(policy_comment(environment, max_requeue_times=1), FAILING))
        await eventually(lambda: _running(live, job_id, 0), what="attempt 0 running")
        backup_url = await installations.backup(live)  # before the failure, the requeue and the limit
        stopped = await eventually(lambda: advice_done(live, job_id, 1), timeout=240, what="attempt 1 decided")
    assert (stopped.operation, stopped.rule) == ("TERMINATE", "retry_limit"), stopped.reason
    assert slurm_lab.scontrol_show(job_id)["Restarts"] == "1"
    assert [m.step for m in await milestones(live, job_id)] == ["requeue_hold", "release"]

    restored = await installations.new(environment, url=backup_url)
    restored = lab_context(restored, environment, data_dir=live.settings.data_dir)  # the same worker, restarted
    async with running_worker(restored, slurm_lab) as runner:
        [adopted] = await eventually(lambda: events(restored, job_id, "job.adopted"), what="job.adopted")
        await _more_ticks(runner, 5)
        zero = await eventually(lambda: advice_done(restored, job_id, 0), what="attempt 0's Advice closed")
    assert adopted.attempt_index == 1
    assert (zero.disposition, zero.disposition_reason) == ("CONVERGED", "ALREADY_SATISFIED"), zero.disposition_message
    assert [a.attempt_index for a in await advice_list(restored, job_id)] == [0]  # none for the adopted attempt
    assert await milestones(restored, job_id) == []  # nothing sent to Slurm
    assert slurm_lab.scontrol_show(job_id)["Restarts"] == "1"  # requeued once, by the first run only


async def _running(ctx: AppContext, job_id: int, index: int) -> bool:
    return any(a.attempt_index == index and a.state == "RUNNING" for a in await attempts(ctx, job_id))


def _deciders(runner: WorkerRunner) -> list[Service]:
    return [s for s in runner.services if s.name in {"advisor", "controller"}]


async def _more_ticks(runner: WorkerRunner, count: int) -> None:
    """Room for a wrong decision or command to show: the advisor and the controller each tick ``count`` more times."""
    base = {s.name: s.ticks for s in _deciders(runner)}

    async def done() -> bool:
        return all(s.ticks >= base[s.name] + count for s in _deciders(runner))

    await eventually(done, what=f"{count} more advisor and controller ticks")
