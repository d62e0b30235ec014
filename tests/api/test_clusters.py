"""Several clusters in one installation: the API lists each cluster with its worker and filters by cluster."""

from __future__ import annotations

import datetime as dt

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.infra.db import utcnow
from app.leases import service as leases
from tests.api.helpers import operation, run_graphql
from tests.factories import seed_job


async def _two_clusters(sessions: async_sessionmaker[AsyncSession]) -> None:
    async with sessions() as session, session.begin():
        await seed_job(session, slurm_job_id=100, workflow_key="wf-a", cluster="alpha")
        await seed_job(session, slurm_job_id=101, workflow_key="wf-a2", cluster="alpha")
        await seed_job(session, slurm_job_id=100, workflow_key="wf-b", cluster="beta")  # same job id, other cluster
    await leases.try_acquire(sessions, name="worker:alpha", holder="host-a:1", seconds=60)
    await leases.try_acquire(
        sessions, name="worker:beta", holder="host-b:2", seconds=60, now=utcnow() - dt.timedelta(hours=1)
    )
    await leases.try_acquire(sessions, name="worker:gamma", holder="host-c:3", seconds=60)  # no job seen yet


async def test_graphql_lists_every_cluster_with_its_worker(
    client: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession]
) -> None:
    await _two_clusters(sessions)
    clusters = (await run_graphql(client, operation("Clusters")))["data"]["clusters"]
    assert [(c["name"], c["jobCount"], c["workflowCount"]) for c in clusters] == [
        ("alpha", 2, 2),
        ("beta", 1, 1),
        ("gamma", 0, 0),
    ]
    workers = {c["name"]: c["worker"] for c in clusters}
    assert workers["alpha"]["holder"] == "host-a:1" and workers["alpha"]["active"] is True
    assert workers["beta"]["active"] is False  # its lease lapsed an hour ago: that worker is not running
    assert all(c["watchdog"] is None for c in clusters)
    one = (await run_graphql(client, operation("Clusters"), {"name": "beta"}))["data"]["clusters"]
    assert [c["name"] for c in one] == ["beta"]
    # every list and lookup takes the cluster
    keys = await run_graphql(client, '{ workflows(filter: {cluster: "beta"}) { nodes { key cluster } } }')
    assert keys["data"]["workflows"]["nodes"] == [{"key": "wf-b", "cluster": "beta"}]
    job = await run_graphql(client, '{ job(jobId: 100, cluster: "alpha") { cluster workflow { key } } }')
    assert job["data"]["job"] == {"cluster": "alpha", "workflow": {"key": "wf-a"}}
    attempts = await run_graphql(client, '{ attempts(filter: {cluster: "beta"}) { nodes { jobId cluster } } }')
    assert attempts["data"]["attempts"]["nodes"] == [{"jobId": 100, "cluster": "beta"}]


async def test_rest_clusters_and_cluster_filters(
    client: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession]
) -> None:
    await _two_clusters(sessions)
    body = (await client.get("/v1/clusters")).json()
    assert [(c["name"], c["enrolledJobCount"], c["worker"]["active"]) for c in body["clusters"]] == [
        ("alpha", 2, True),
        ("beta", 1, False),
        ("gamma", 0, True),
    ]
    assert [c["name"] for c in (await client.get("/v1/clusters", params={"cluster": "alpha"})).json()["clusters"]] == [
        "alpha"
    ]
    workflows = (await client.get("/v1/workflows", params={"cluster": "alpha"})).json()["workflows"]
    assert sorted(w["workflowId"] for w in workflows) == ["wf-a", "wf-a2"]
    beta = (await client.get("/v1/jobs/by-scheduler-id/100", params={"cluster": "beta"})).json()["attempts"]
    assert [(a["cluster"], a["workflowId"]) for a in beta] == [("beta", "wf-b")]
