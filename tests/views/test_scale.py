"""Pages stay fast with 10,000 workflows: keyset pages, a fixed number of statements per page (no N+1)."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator
from typing import Any

from sqlalchemy import event, insert, select

from app.advice.models import Advice
from app.evidence.models import Anomaly
from app.jobs.models import Attempt, Job, Workflow
from tests.factories import T0, seed_history
from tests.views.html import parse

WORKFLOWS = 10_000


@contextlib.contextmanager
def count_statements(engine: Any) -> Iterator[list[str]]:
    statements: list[str] = []

    def before(conn, cursor, statement, parameters, context, executemany):
        statements.append(statement)

    event.listen(engine.sync_engine, "before_cursor_execute", before)
    try:
        yield statements
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", before)


async def _bulk_workflows(sessions: Any, count: int) -> None:
    """Workflows, each with one job, attempt 0 (FAILED for every 7th), an anomaly and active Advice on some."""
    async with sessions() as session, session.begin():
        await session.execute(
            insert(Workflow),
            [
                {
                    "cluster": "test",
                    "environment": "test-env",
                    "workflow_key": f"wf-{i:05d}",
                    "latest_state": "FAILED" if i % 7 == 0 else "RUNNING",
                    "latest_job_name": f"job-{i}",
                    "attempt_count": 1,
                    "failed_attempt_count": int(i % 7 == 0),
                    "created_at": T0,
                    "updated_at": T0 + dt.timedelta(seconds=i),
                }
                for i in range(count)
            ],
        )
        ids = dict((await session.execute(select(Workflow.workflow_key, Workflow.id))).all())
        await session.execute(
            insert(Job),
            [
                {
                    "cluster": "test",
                    "slurm_job_id": 100000 + i,
                    "incarnation": 0,
                    "workflow_id": ids[f"wf-{i:05d}"],
                    "name": f"job-{i}",
                    "enrolment": "ENROLLED",
                    "registered_mode": "observe",
                    "restart_count": 0,
                    "shared_log_paths": False,
                }
                for i in range(count)
            ],
        )
        jobs = dict((await session.execute(select(Job.slurm_job_id, Job.id))).all())
        await session.execute(
            insert(Attempt),
            [
                {
                    "uuid": f"00000000-0000-5000-8000-{i:012d}",
                    "job_id": jobs[100000 + i],
                    "workflow_id": ids[f"wf-{i:05d}"],
                    "cluster": "test",
                    "slurm_job_id": 100000 + i,
                    "attempt_index": 0,
                    "state": "FAILED" if i % 7 == 0 else "RUNNING",
                    "nodes": [],
                    "excluded_nodes": [],
                    "held": False,
                    "created_at": T0,
                    "updated_at": T0,
                }
                for i in range(count)
            ],
        )
        attempts = dict((await session.execute(select(Attempt.slurm_job_id, Attempt.id))).all())
        failed = [i for i in range(count) if i % 7 == 0]
        await session.execute(
            insert(Anomaly),
            [
                {
                    "attempt_id": attempts[100000 + i],
                    "event_key": f"bulk-{i}",
                    "kind": "CRASH",
                    "category": "segfault",
                    "detector": "signatures",
                    "details": {},
                    "detected_at": T0,
                }
                for i in failed
            ],
        )
        await session.execute(
            insert(Advice),
            [
                {
                    "attempt_id": attempts[100000 + i],
                    "job_id": jobs[100000 + i],
                    "cluster": "test",
                    "slurm_job_id": 100000 + i,
                    "attempt_index": 0,
                    "operation": "RESTART",
                    "exclusions": [],
                    "reason": "crash",
                    "evidence": {},
                    "generation": 1,
                    "mode": "observe",
                    "active": True,
                    "disposition": "PENDING",
                    "reconcile_failures": 0,
                    "created_at": T0,
                    "updated_at": T0,
                }
                for i in failed
            ],
        )


async def test_overview_with_10000_workflows_costs_a_fixed_number_of_statements(viewer, sessions, database) -> None:
    await _bulk_workflows(sessions, WORKFLOWS)
    await viewer.get("/dashboard/workflow")  # warm caches (template compile, first connection)
    with count_statements(database.engine) as statements:
        first = await viewer.get("/dashboard/workflow")
    doc = parse(first.text)
    rows = doc.find_all("tr", data_workflow=True)
    assert len(rows) == 50 and rows[0].attrs["data-workflow"] == "wf-09999"
    first_count = len(statements)
    # fixed: the page, summaries (4: anomaly, Advice, latest jobs, their attempt counts), stories of the latest
    # jobs (8, with the newest saved checkpoint), facets (3), filter choices, leases, not enrolled, and one for the
    # restart-storm banner (open cluster pauses)
    assert first_count <= 20, statements
    # a deep page (keyset, not OFFSET) costs the same statements
    href = doc.find("a", rel="next").attrs["href"]
    for _ in range(3):
        page = parse((await viewer.get(href)).text)
        href = page.find("a", rel="next").attrs["href"]
    with count_statements(database.engine) as statements:
        deep = await viewer.get(href)
    assert len(statements) == first_count
    # keyset: the deep page seeks past the cursor's (updated_at, id); SQLite renders an always-zero OFFSET, so look for
    # the seek
    assert "(workflows.updated_at, workflows.id) <" in statements[0]
    failed_only = parse((await viewer.get("/dashboard/workflow?failed=1")).text)
    assert all(int(r.attrs["data-workflow"][3:]) % 7 == 0 for r in failed_only.find_all("tr", data_workflow=True))
    assert deep.status_code == 200


async def test_workflow_and_details_pages_do_not_grow_statements_with_attempts(viewer, sessions, database) -> None:
    small = await seed_history(sessions, slurm_job_id=1000)
    with count_statements(database.engine) as few:
        await viewer.get("/dashboard/workflow/llama-pretrain")
    from app.jobs import service as jobs

    async with sessions() as session, session.begin():
        job = await session.get(Job, small.job_id)
        for index in range(2, 30):
            await jobs.create_attempt(session, job=job, attempt_index=index, state="FAILED")
    with count_statements(database.engine) as many:
        page = await viewer.get("/dashboard/workflow/llama-pretrain")
    assert len(parse(page.text).find_all("tr", data_attempt=True)) == 30
    assert len(many) == len(few)
    with count_statements(database.engine) as timeline:
        await viewer.get("/dashboard/jobs/1000/attempts/0/timeline")
    assert len(timeline) <= 10
