"""A script-style client pages through every audit event with cursors and gets each exactly once."""

from __future__ import annotations

import datetime as dt

import httpx
import pytest
from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.api.ids import to_global_id
from app.audit.models import AuditEvent
from tests.api.helpers import operation, run_graphql
from tests.plugins.database import Database

pytestmark = pytest.mark.slow


async def _insert_events(sessions: async_sessionmaker[AsyncSession], count: int) -> list[int]:
    base = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    # Many events share a produced time, so the id half of the (produced_at, id) key matters.
    rows = [
        {
            "component": "watcher",
            "event_type": "anomaly.detected",
            "level": "INFO",
            "message": f"e{n}",
            "payload": {},
            "slurm_job_id": 9000 + n % 7,
            "attempt_index": n % 3,
            "produced_at": base + dt.timedelta(seconds=n // 10),
            "recorded_at": base,
        }
        for n in range(count)
    ]
    async with sessions() as session, session.begin():
        for start in range(0, count, 2000):
            await session.execute(insert(AuditEvent), rows[start : start + 2000])
    async with sessions() as session:
        return list((await session.scalars(select(AuditEvent.id))).all())


async def test_page_through_all_audit_events_exactly_once(
    client: httpx.AsyncClient, database: Database, sessions: async_sessionmaker[AsyncSession]
) -> None:
    count = 10_000 if database.backend == "postgres" else 2_000
    ids = await _insert_events(sessions, count)
    for order in ("DESC", "ASC"):
        seen: list[str] = []
        produced: list[str] = []
        after = None
        while True:
            body = await run_graphql(
                client, operation("AuditEventsPage"), {"first": 100, "after": after, "order": order}
            )
            page = body["data"]["auditEvents"]
            seen += [edge["node"]["id"] for edge in page["edges"]]
            produced += [edge["node"]["producedAt"] for edge in page["edges"]]
            if not page["pageInfo"]["hasNextPage"]:
                break
            after = page["pageInfo"]["endCursor"]
        assert len(seen) == count and set(seen) == {to_global_id("AuditEvent", pk) for pk in ids}
        assert produced == sorted(produced, reverse=order == "DESC")


async def test_rest_client_pages_through_one_job_exactly_once(
    client: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession]
) -> None:
    await _insert_events(sessions, 1400)
    seen, token = [], None
    while True:
        response = await client.get("/v1/audit/events", params={"jobId": 9003, **({"page": token} if token else {})})
        body = response.json()
        seen += [event["id"] for event in body["events"]]
        token = body["nextPageToken"]
        if not token:
            break
    assert len(seen) == len(set(seen)) == 200
