"""Goodput over GraphQL: a workflow's and the cluster's buckets, which add up to the runs' wall time."""

from __future__ import annotations

import datetime as dt

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.infra.db import utcnow
from tests.api.helpers import operation, run_graphql
from tests.factories import CLUSTER, seed_history

BUCKETS = (
    "productiveSeconds",
    "startupSeconds",
    "restartToProgressSeconds",
    "lostSinceCheckpointSeconds",
    "detectionDelaySeconds",
    "decisionToReleaseSeconds",
    "queueWaitSeconds",
)


async def test_workflow_and_cluster_goodput(
    client: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession]
) -> None:
    # attempt 0: start +1 min, checkpoint +20, Xid +31, FAILED +32, Advice +32:05 (observe: no release)
    await seed_history(sessions, second_running=False, t0=utcnow() - dt.timedelta(hours=2))
    data = (await run_graphql(client, operation("Goodput"), {"cluster": CLUSTER, "workflowKey": "llama-pretrain"}))[
        "data"
    ]
    total = data["workflow"]["goodput"]["total"]
    assert total["productiveSeconds"] == 19 * 60 and total["lostSinceCheckpointSeconds"] == 11 * 60
    assert total["detectionDelaySeconds"] == 65 and total["wallSeconds"] == 31 * 60 + 5
    assert sum(total[b] for b in BUCKETS) == total["wallSeconds"]
    assert total["effectiveTrainingPercent"] == round(100 * 19 * 60 / (31 * 60 + 5), 2)
    assert data["workflow"]["goodput"]["failures"] == 1
    assert [(a["attemptIndex"], a["goodput"]["wallSeconds"]) for a in data["workflow"]["goodput"]["attempts"]] == [
        (0, 31 * 60 + 5)
    ]
    cluster = data["goodput"]
    assert cluster["runs"] == 1 and cluster["total"] == total and cluster["truncated"] is False
    bad = await run_graphql(client, "{ goodput(sinceHours: 0) { runs } }", expect_errors=True)
    assert "sinceHours" in bad["errors"][0]["message"]
