"""No N+1: a page of attempts with workflow, job, Advice (and milestones), checkpoints and anomalies costs a
constant number of statements."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from tests.api.helpers import operation, run_graphql
from tests.factories import seed_many
from tests.plugins.database import Database


class StatementCounter:
    """Counts SQL statements sent through an engine (before_cursor_execute)."""

    def __init__(self, database: Database) -> None:
        self.engine = database.engine.sync_engine
        self.statements: list[str] = []

    def __enter__(self) -> StatementCounter:
        event.listen(self.engine, "before_cursor_execute", self._count)
        return self

    def __exit__(self, *exc: Any) -> None:
        event.remove(self.engine, "before_cursor_execute", self._count)

    def _count(self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        self.statements.append(statement)


async def _statements_for_page(client: httpx.AsyncClient, database: Database, size: int) -> tuple[int, list[dict]]:
    with StatementCounter(database) as counter:
        body = await run_graphql(client, operation("AttemptsOverview"), {"first": size})
    return len(counter.statements), [e["node"] for e in body["data"]["attempts"]["edges"]]


async def test_attempt_page_costs_the_same_for_10_and_100_attempts(
    client: httpx.AsyncClient, database: Database, sessions: async_sessionmaker[AsyncSession]
) -> None:
    await seed_many(sessions, count=50, attempts=2, checkpoints=4, anomalies=1, advice=True)
    small, small_nodes = await _statements_for_page(client, database, 10)
    large, large_nodes = await _statements_for_page(client, database, 100)
    assert len(small_nodes) == 10 and len(large_nodes) == 100
    # Every fanned-out field really resolved, so the count covers them.
    for node in large_nodes:
        assert node["workflow"]["key"].startswith("wf-")
        assert node["advice"]["reconciliation"]["milestones"][0]["step"] == "requeue_hold"
        assert len(node["checkpoints"]["edges"]) == 3 and len(node["anomalies"]["edges"]) == 1
        assert node["effectiveMode"] == "observe" and node["job"]["enrolment"] == "ENROLLED"
    assert small == large, f"{small} statements for 10 attempts but {large} for 100"
    # attempts page, workflows, jobs, advice, milestones, checkpoints, anomalies
    assert large <= 8, large


async def test_jobs_of_workflows_attempt_counts_are_batched(
    client: httpx.AsyncClient, database: Database, sessions: async_sessionmaker[AsyncSession]
) -> None:
    await seed_many(sessions, count=30, attempts=3)
    query = (
        "query($n:Int){ workflows(first:$n){ edges{ node{ key } } } attempts(first:$n){ edges{ "
        "node{ job{ attempts(first:2){ totalCount edges{ node{ attemptRef } } } policy{ valid } } } } } }"
    )
    counts = []
    for size in (5, 60):
        with StatementCounter(database) as counter:
            body = await run_graphql(client, query, {"n": size})
        assert len(body["data"]["attempts"]["edges"]) == size
        assert all(e["node"]["job"]["attempts"]["totalCount"] == 3 for e in body["data"]["attempts"]["edges"])
        counts.append(len(counter.statements))
    assert counts[0] == counts[1], counts


async def test_goodput_of_a_page_of_workflows_is_one_batch(
    client: httpx.AsyncClient, database: Database, sessions: async_sessionmaker[AsyncSession]
) -> None:
    await seed_many(sessions, count=30, attempts=2, checkpoints=1, anomalies=1, advice=True)
    query = "query($n: Int) { workflows(first: $n) { nodes { key goodput { runs total { wallSeconds } } } } }"
    counts = []
    for size in (3, 30):
        with StatementCounter(database) as counter:
            body = await run_graphql(client, query, {"n": size})
        nodes = body["data"]["workflows"]["nodes"]
        assert len(nodes) == size and all(n["goodput"]["runs"] >= 1 for n in nodes)
        counts.append(len(counter.statements))
    assert counts[0] == counts[1], counts
