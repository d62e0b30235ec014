"""Audit events: recorded with a change-feed entry, filtered as SPEC §7 says, paged by keyset."""

import datetime as dt
from typing import Any

import pytest

from app.audit import queries as audit_queries
from app.audit import service as audit
from app.domain.edge.cursor import CursorError
from app.feed import queries as feed_queries
from app.infra.db import read_session_factory
from app.infra.pagination import PageArgumentError, PageRequest

T0 = dt.datetime(2026, 11, 30, 2, 0, tzinfo=dt.UTC)


async def _seed(sessions, count: int = 30) -> None:
    async with sessions() as session, session.begin():
        for i in range(count):
            await audit.record(
                session,
                component="watcher" if i % 3 == 0 else "controller",
                event_type="anomaly.detected" if i % 3 == 0 else "scheduler.release",
                level="WARNING" if i % 5 == 0 else "INFO",
                message=f"event {i}",
                slurm_job_id=100 + (i % 2),
                attempt_index=i % 4,
                produced_at=T0 + dt.timedelta(seconds=i // 2),  # pairs share a timestamp: ties broken by id
            )


async def test_record_appends_feed_entry_in_same_transaction(sessions) -> None:
    async with sessions() as session, session.begin():
        event = await audit.record(session, component="api", event_type="advice.vetoed", message="x", actor="alice")
        assert event is not None
    async with sessions() as session:
        entries = await feed_queries.read_since(session, after_id=0)
    assert [(e.topic, e.entity_id) for e in entries] == [("audit", event.id)]


async def test_rolled_back_event_leaves_no_feed_entry(sessions) -> None:
    with pytest.raises(RuntimeError):
        async with sessions() as session, session.begin():
            await audit.record(session, component="api", event_type="x.y", message="x")
            raise RuntimeError("boom")
    async with sessions() as session:
        assert await feed_queries.latest_id(session) == 0


@pytest.mark.parametrize("descending", [True, False])
async def test_pages_cover_every_event_exactly_once(sessions, descending: bool) -> None:
    await _seed(sessions)
    seen: list[int] = []
    after = None
    async with sessions() as session:
        while True:
            page = await audit_queries.query(
                session,
                filter=audit_queries.AuditFilter(),
                page=PageRequest.build(first=7, after=after),
                descending=descending,
            )
            seen.extend(e.id for e in page.items)
            if not page.has_next_page:
                break
            after = page.end_cursor
    assert len(seen) == 30 and len(set(seen)) == 30
    async with sessions() as session:
        everything = await audit_queries.query(
            session, filter=audit_queries.AuditFilter(), page=PageRequest.build(first=100), descending=descending
        )
    assert seen == [e.id for e in everything.items]
    keys = [(e.produced_at, e.id) for e in everything.items]
    assert keys == sorted(keys, reverse=descending)


async def test_backward_paging_mirrors_forward(sessions) -> None:
    await _seed(sessions)
    async with sessions() as session:
        forward = await audit_queries.query(
            session, filter=audit_queries.AuditFilter(), page=PageRequest.build(first=100)
        )
        ids = [e.id for e in forward.items]
        middle_cursor = forward.cursors[10]
        back = await audit_queries.query(
            session, filter=audit_queries.AuditFilter(), page=PageRequest.build(last=5, before=middle_cursor)
        )
    assert [e.id for e in back.items] == ids[5:10]
    assert back.has_previous_page and back.has_next_page


async def test_filters(sessions) -> None:
    await _seed(sessions)

    async def ids(**kw) -> list[int]:
        async with sessions() as session:
            page = await audit_queries.query(
                session, filter=audit_queries.AuditFilter(**kw), page=PageRequest.build(first=100)
            )
        return [e.id for e in page.items]

    by_job = await ids(slurm_job_id=100)
    assert len(by_job) == 15
    attempt0 = await ids(slurm_job_id=100, attempt_index=0)
    assert attempt0 and set(attempt0) < set(by_job)
    assert len(await ids(component="watcher")) == 10
    assert len(await ids(event_type="anomaly.detected", level="WARNING")) == 2  # i in {0, 15}
    window = await ids(produced_after=T0 + dt.timedelta(seconds=5), produced_before=T0 + dt.timedelta(seconds=7))
    assert len(window) == 4
    assert await ids(event_type="anomaly") == []  # exact match, not prefix


def test_filter_validation() -> None:
    with pytest.raises(audit_queries.AuditFilterError):
        audit_queries.AuditFilter(level="LOUD")
    with pytest.raises(audit_queries.AuditFilterError):
        audit_queries.AuditFilter(attempt_index=0)
    assert audit_queries.parse_job_reference(" 123/0 ") == (123, 0)
    assert audit_queries.parse_job_reference("123") == (123, None)
    for bad in ["", "12a", "1/x", "/1", "1/-1"]:
        with pytest.raises(audit_queries.AuditFilterError):
            audit_queries.parse_job_reference(bad)


async def test_foreign_or_damaged_cursor_is_refused(sessions) -> None:
    await _seed(sessions, 3)
    async with sessions() as session:
        with pytest.raises(CursorError):
            await audit_queries.query(
                session, filter=audit_queries.AuditFilter(), page=PageRequest.build(first=2, after="not-a-cursor")
            )
    with pytest.raises(PageArgumentError):
        PageRequest.build(first=1000, max_size=100)
    with pytest.raises(PageArgumentError):
        PageRequest.build(first=1, last=1)


async def test_read_sessions_serve_the_same_pages(database, sessions) -> None:
    # On PostgreSQL the API reads pages in autocommit sessions (app.infra.db.read_session_factory).
    await _seed(sessions)
    async with sessions() as session, session.begin():
        await audit.record(session, component="api", event_type="checkpoint_saved.x%", message="odd", payload={"a": 1})
    reads = read_session_factory(database.engine, sessions)
    filters: list[dict[str, Any]] = [
        {},
        {"slurm_job_id": 100},
        {"slurm_job_id": 101, "attempt_index": 0},
        {"component": "controller", "level": "INFO"},
        {"produced_after": T0 + dt.timedelta(seconds=3), "produced_before": T0 + dt.timedelta(seconds=9)},
        {"event_type_family": "checkpoint_saved.x%"},
        {"cluster": "", "workflow_id": None, "event_type": "scheduler.release"},
    ]

    async def page(factory, flt, request, descending):
        async with factory() as session:
            return await audit_queries.query(session, filter=flt, page=request, descending=descending)

    for kw in filters:
        flt = audit_queries.AuditFilter(**kw)
        for descending in (True, False):
            first = await page(sessions, flt, PageRequest.build(first=4), descending)
            requests = [PageRequest.build(first=4), PageRequest.build(first=0)]
            if first.end_cursor:
                requests += [
                    PageRequest.build(first=4, after=first.end_cursor),
                    PageRequest.build(last=2, before=first.end_cursor),
                ]
            for request in requests:
                expected = await page(sessions, flt, request, descending)
                got = await page(reads, flt, request, descending)
                assert list(got.items) == list(expected.items)
                assert list(got.cursors) == list(expected.cursors)
                assert (got.has_next_page, got.has_previous_page) == (
                    expected.has_next_page,
                    expected.has_previous_page,
                )
    assert (reads is sessions) == (database.backend == "sqlite")
