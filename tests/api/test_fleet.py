"""Node reputation and fleet actions over GraphQL: viewers read `nodes`, only operators clear or pin (audited)."""

from __future__ import annotations

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.domain.decision.advice import Failure
from app.domain.decision.retry import FailureKind
from app.fleet import service as fleet
from app.infra.config import Settings
from tests.api.helpers import operation, run_graphql
from tests.factories import CLUSTER


async def blame_node(sessions: async_sessionmaker[AsyncSession], node: str, jobs: list[int]) -> None:
    settings = Settings.build(cluster=CLUSTER, node_suspect_jobs=3)
    for job in jobs:
        failure = Failure(
            attempt_index=0,
            kind=FailureKind.CRASH,
            category="XID",
            implicated_nodes=(node,),
            outlook="infrastructure",
            evidence_refs=(f"anomaly:{job}",),
        )
        async with sessions() as session, session.begin():
            await fleet.note_failure(
                session, settings=settings, job_id=job, attempt_id=job * 10, slurm_job_id=job, failure=failure
            )


async def test_nodes_show_evidence_and_only_operators_change_a_node(
    token_client: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession]
) -> None:
    await blame_node(sessions, "gpu7", [301, 302, 303])
    body = await run_graphql(token_client, operation("Nodes"), {"cluster": CLUSTER}, token="viewer-token")
    [node] = body["data"]["nodes"]
    assert (node["name"], node["state"], node["excluded"], node["jobs"]) == ("gpu7", "SUSPECT", True, [301, 302, 303])
    assert [(e["jobId"], e["category"], e["refs"]) for e in node["evidence"]] == [
        (301, "XID", ["anomaly:301"]),
        (302, "XID", ["anomaly:302"]),
        (303, "XID", ["anomaly:303"]),
    ]
    variables = {"cluster": CLUSTER, "node": "gpu7", "action": "clear"}
    refused = await run_graphql(
        token_client, operation("SetNodeStanding"), variables, token="viewer-token", expect_errors=True
    )
    assert refused["errors"][0]["extensions"]["code"] == "FORBIDDEN"
    cleared = await run_graphql(token_client, operation("SetNodeStanding"), variables, token="operator-token")
    assert cleared["data"]["setNodeStanding"] == {
        "cluster": CLUSTER,
        "name": "gpu7",
        "state": "CLEARED",
        "excluded": False,
        "changedBy": "otto",
    }
    pinned = await run_graphql(
        token_client,
        operation("SetNodeStanding"),
        {**variables, "node": "gpu9", "action": "pin"},
        token="operator-token",
    )
    assert (pinned["data"]["setNodeStanding"]["state"], pinned["data"]["setNodeStanding"]["excluded"]) == (
        "PINNED",
        True,
    )
    wrong = await run_graphql(
        token_client,
        operation("SetNodeStanding"),
        {**variables, "action": "drop"},
        token="operator-token",
        expect_errors=True,
    )
    assert wrong["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    audit = await run_graphql(
        token_client,
        '{ auditEvents(filter: {component: "api"}, first: 10) { edges { node { eventType actor } } } }',
        token="viewer-token",
    )
    assert sorted((e["node"]["eventType"], e["node"]["actor"]) for e in audit["data"]["auditEvents"]["edges"]) == [
        ("node.cleared", "otto"),
        ("node.pinned", "otto"),
    ]


async def test_fleet_actions_without_a_target_are_clear_errors(token_client: httpx.AsyncClient) -> None:
    storm = await run_graphql(
        token_client, operation("ConfirmStorm"), {"cluster": CLUSTER}, token="operator-token", expect_errors=True
    )
    assert (
        storm["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT" and "not paused" in storm["errors"][0]["message"]
    )
    release = await run_graphql(
        token_client, operation("ReleaseHeldAdvice"), {"id": "nope"}, token="operator-token", expect_errors=True
    )
    assert release["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    extend = await run_graphql(
        token_client,
        operation("ExtendBudget"),
        {"cluster": CLUSTER, "workflowId": "missing", "extra": 2},
        token="operator-token",
        expect_errors=True,
    )
    assert extend["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    zero = await run_graphql(
        token_client,
        operation("ExtendBudget"),
        {"cluster": CLUSTER, "extra": 0},
        token="operator-token",
        expect_errors=True,
    )
    assert zero["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"


async def test_rest_lists_nodes_with_their_evidence(
    token_client: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession]
) -> None:
    await blame_node(sessions, "gpu8", [401, 402, 403])
    response = await token_client.get("/v1/nodes?state=suspect", headers={"Authorization": "Bearer viewer-token"})
    assert response.status_code == 200
    [node] = response.json()["nodes"]
    assert (node["name"], node["state"], node["excluded"], node["jobs"]) == ("gpu8", "SUSPECT", True, [401, 402, 403])
    assert [e["jobId"] for e in node["evidence"]] == [401, 402, 403]
    none = await token_client.get("/v1/nodes?state=PINNED", headers={"Authorization": "Bearer viewer-token"})
    assert none.json() == {"nodes": []}
