"""REST compatibility (/v1): the user guide's field names, nextPageToken paging, §7 filters, JSON errors, URL prefix."""

from __future__ import annotations

import datetime as dt
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.audit import service as audit
from app.domain.control.identity import attempt_uuid
from app.infra.config import Settings
from app.infra.context import AppContext
from app.jobs import service as jobs
from app.main import create_app
from tests.factories import CLUSTER, registration, seed_job, seed_many
from tests.plugins.database import Database


async def _all_pages(client: httpx.AsyncClient, path: str, key: str, **params: Any) -> list[dict]:
    rows, token = [], None
    for _ in range(1000):
        response = await client.get(path, params={**params, **({"page": token} if token else {})})
        assert response.status_code == 200, response.text
        body = response.json()
        rows += body[key]
        token = body["nextPageToken"]
        if not token:
            return rows
    raise AssertionError("paging did not end")


async def test_jobs_by_scheduler_id(client: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession]) -> None:
    async with sessions() as session, session.begin():
        await seed_job(session, slurm_job_id=12345, workflow_key="training-example", attempts=3)
    response = await client.get("/v1/jobs/by-scheduler-id/12345")
    assert response.status_code == 200
    body = response.json()
    assert body["nextPageToken"] is None
    assert [(a["jobId"], a["attemptIndex"]) for a in body["attempts"]] == [(12345, 0), (12345, 1), (12345, 2)]
    first = body["attempts"][0]
    assert first["heimdallJobId"] == attempt_uuid(CLUSTER, 12345, 0) and first["attemptRef"] == "12345-0"
    assert (
        first["state"] == "FAILED" and first["workflowId"] == "training-example" and first["effectiveMode"] == "observe"
    )
    paged = await _all_pages(client, "/v1/jobs/by-scheduler-id/12345", "attempts", limit=2)
    assert [a["attemptIndex"] for a in paged] == [0, 1, 2]
    assert body["enrolment"] == {
        "jobId": 12345,
        "cluster": CLUSTER,
        "enrolled": True,
        "enrolment": "ENROLLED",
        "reason": body["enrolment"]["reason"],
    }
    missing = await client.get("/v1/jobs/by-scheduler-id/999")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "NOT_FOUND"
    bad = await client.get("/v1/jobs/by-scheduler-id/abc")
    assert bad.status_code == 400 and "job id" in bad.json()["error"]["message"]


async def test_a_refused_job_answers_its_enrolment_not_a_404(
    client: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession]
) -> None:
    reason = "The policy's environment 'Test-Env' does not equal this installation's environment 'test-env'"
    async with sessions() as session, session.begin():
        await jobs.register_job(
            session,
            registration=registration(777, enrolment="ENVIRONMENT_MISMATCH", enrolment_reason=reason),
        )
    response = await client.get("/v1/jobs/by-scheduler-id/777")
    assert response.status_code == 200
    body = response.json()
    assert body["attempts"] == [] and body["nextPageToken"] is None
    assert body["enrolment"]["enrolled"] is False and body["enrolment"]["enrolment"] == "ENVIRONMENT_MISMATCH"
    assert body["enrolment"]["reason"] == reason and body["enrolment"]["jobId"] == 777


async def test_jobs_by_scheduler_id_names_array_tasks(
    client: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession]
) -> None:
    # array 151: tasks 1-2 got ids 152-153, the last task (3) kept the array's id 151
    async with sessions() as session, session.begin():
        for job_id, task in ((152, 1), (153, 2), (151, 3)):
            await seed_job(session, slurm_job_id=job_id, workflow_key="arr", attempts=1, array=(151, task))
    task2 = (await client.get("/v1/jobs/by-scheduler-id/151_2")).json()["attempts"]
    assert [(a["jobId"], a["arrayJobId"], a["arrayTaskId"], a["schedulerJobId"]) for a in task2] == [
        (153, 151, 2, "151_2")
    ]
    last = (await client.get("/v1/jobs/by-scheduler-id/151_3")).json()["attempts"]
    plain = (await client.get("/v1/jobs/by-scheduler-id/151")).json()["attempts"]
    assert [a["schedulerJobId"] for a in last] == [a["schedulerJobId"] for a in plain] == ["151_3"]
    assert (await client.get("/v1/jobs/by-scheduler-id/153", params={"cluster": CLUSTER})).json()["attempts"][0][
        "schedulerJobId"
    ] == "151_2"
    missing = await client.get("/v1/jobs/by-scheduler-id/151_9")
    assert missing.status_code == 404 and "151_9" in missing.json()["error"]["message"]
    for bad in ("151_", "_2", "151_2_3", "151-2x", "0_1"):
        response = await client.get(f"/v1/jobs/by-scheduler-id/{bad}")
        assert response.status_code == 400, bad
    plain_job = (await client.get("/v1/jobs/by-scheduler-id/151")).json()["attempts"][0]
    assert plain_job["arrayJobId"] == 151


async def test_advice_listing_pages_with_tokens(
    client: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession]
) -> None:
    seeded = await seed_many(sessions, count=7, attempts=1, advice=True)
    default = (await client.get("/v1/advice", params={"limit": "100"})).json()
    assert len(default["advice"]) == 7 and default["nextPageToken"] is None
    record = default["advice"][0]
    assert {
        "jobId",
        "attemptIndex",
        "heimdallJobId",
        "operation",
        "exclusions",
        "generation",
        "reconciliationStatus",
    } <= set(record)
    assert record["reconciliationStatus"]["milestones"][0]["idempotencyKey"].startswith("idem-")
    paged = await _all_pages(client, "/v1/advice", "advice", limit=3)
    assert (
        [a["id"] for a in paged]
        == [a["id"] for a in default["advice"]]
        == sorted((a.id for a in seeded.advice), reverse=True)
    )
    async with sessions() as session, session.begin():
        row = await session.get(type(seeded.advice[0]), seeded.advice[0].id)
        assert row is not None
        row.active = False
    active = (await client.get("/v1/advice", params={"onlyActive": "true"})).json()["advice"]
    assert len(active) == 6 and seeded.advice[0].id not in {a["id"] for a in active}
    assert len((await client.get("/v1/advice")).json()["advice"]) == 7  # omitting onlyActive keeps resolved records


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"limit": "251"}, "in 1..250"),
        ({"limit": "0"}, "in 1..250"),
        ({"limit": "ten"}, "in 1..250"),
        ({"page": "not-a-token"}, "invalid page token"),
        ({"onlyActive": "maybe"}, "true or false"),
    ],
)
async def test_advice_bad_parameters_are_400(client: httpx.AsyncClient, params: dict, message: str) -> None:
    response = await client.get("/v1/advice", params=params)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "INVALID_ARGUMENT" and message in response.json()["error"]["message"]


async def test_a_token_of_another_listing_is_refused(
    client: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession]
) -> None:
    await seed_many(sessions, count=3, advice=True)
    token = (await client.get("/v1/workflows", params={"limit": 1})).json()["nextPageToken"]
    assert token
    response = await client.get("/v1/advice", params={"page": token})
    assert response.status_code == 400 and "page token" in response.json()["error"]["message"]


async def test_workflows_listing(client: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession]) -> None:
    await seed_many(sessions, count=5)
    rows = await _all_pages(client, "/v1/workflows", "workflows", limit=2)
    assert [w["workflowId"] for w in rows] == [f"wf-{n}" for n in range(4, -1, -1)]
    assert (await client.get("/v1/workflows", params={"search": "wf-3"})).json()["workflows"][0]["workflowId"] == "wf-3"
    assert (await client.get("/v1/workflows", params={"limit": 251})).status_code == 400


async def test_audit_events_filters(client: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession]) -> None:
    base = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    async with sessions() as session, session.begin():
        for n in range(6):
            await audit.record(
                session,
                component="watcher" if n % 2 else "controller",
                event_type="anomaly.detected" if n % 2 else "scheduler.release",
                level="WARNING" if n % 3 == 0 else "INFO",
                message=f"e{n}",
                slurm_job_id=77,
                attempt_index=n % 2,
                produced_at=base + dt.timedelta(seconds=n),
            )
    everything = (await client.get("/v1/audit/events", params={"jobId": 77, "order": "asc"})).json()
    assert [e["message"] for e in everything["events"]] == [f"e{n}" for n in range(6)]
    assert everything["events"][0]["producedAtMicros"] == 1735689600000000
    attempt0 = (await client.get("/v1/audit/events", params={"jobId": 77, "attemptIndex": 0})).json()["events"]
    assert [e["message"] for e in attempt0] == ["e4", "e2", "e0"]  # attempt 0 is a real filter; newest first by default
    by_fields = (
        await client.get(
            "/v1/audit/events", params={"component": "watcher", "eventType": "anomaly.detected", "level": "WARNING"}
        )
    ).json()["events"]
    assert [e["message"] for e in by_fields] == ["e3"]
    micros = (
        await client.get(
            "/v1/audit/events",
            params={"jobId": 77, "producedAfter": 1735689602000000, "producedBefore": "2025-01-01T00:00:04Z"},
        )
    ).json()["events"]
    assert [e["message"] for e in micros] == ["e3", "e2"]
    paged = await _all_pages(client, "/v1/audit/events", "events", jobId=77, limit=4)
    assert len(paged) == 6
    for params, status in (
        ({"limit": 101}, 400),
        ({"attemptIndex": 0}, 400),
        ({"level": "LOUD"}, 400),
        ({"producedAfter": "yesterday"}, 400),
        ({"order": "up"}, 400),
    ):
        response = await client.get("/v1/audit/events", params=params)
        assert response.status_code == status, (params, response.text)
        assert set(response.json()["error"]) == {"code", "message"}


async def test_rest_and_graphql_honour_the_url_prefix(
    database: Database, tmp_path, sessions: async_sessionmaker[AsyncSession]
) -> None:
    prefix = "/mission-control/recovery-engine-api"
    settings = Settings.build(database_url=database.url, data_dir=str(tmp_path), dev_no_auth=True, url_prefix=prefix)
    app = create_app(settings, ctx=AppContext(settings=settings, engine=database.engine, sessions=database.sessions))
    await seed_many(sessions, count=1)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as http:
        assert (await http.get(f"{prefix}/v1/jobs/by-scheduler-id/1000")).status_code == 200
        assert (await http.post(f"{prefix}/graphql", json={"query": "{ viewer { name } }"})).json()["data"]["viewer"][
            "name"
        ] == "dev"
        assert (await http.get("/v1/jobs/by-scheduler-id/1000")).status_code == 404
