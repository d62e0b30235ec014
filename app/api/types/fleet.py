"""GraphQL types of fleet-wide trust: compute nodes and their reputation, budget holds, storm pauses."""

from __future__ import annotations

import datetime as dt
from typing import Any

import strawberry

from app.api.derive import graphql_fields
from app.api.ids import to_global_id
from app.fleet import read_model


@graphql_fields(read_model.NODE_EVIDENCE)
@strawberry.type(description="Hardware/infrastructure evidence that blamed a node in one attempt.")
class NodeEvidence:
    row: strawberry.Private[Any]


@graphql_fields(read_model.COMPUTE_NODE)
@strawberry.type(description="A compute node's standing on its cluster (named so: `Node` is the Relay interface).")
class ComputeNode:
    row: strawberry.Private[Any]
    blames: strawberry.Private[list[Any]]

    @strawberry.field
    def evidence(self) -> list[NodeEvidence]:
        return [NodeEvidence(row=b) for b in self.blames]


@strawberry.type(description="An Advice held past a recovery budget: not carried out until released or extended.")
class RecoveryHold:
    advice_id: strawberry.ID = strawberry.field(description="Global id of the held Advice.")
    cluster: str
    job_id: int = strawberry.field(description="Slurm job id.")
    attempt_index: int
    budget: str = strawberry.field(description="workflow or cluster.")
    message: str
    created_at: dt.datetime
    released_at: dt.datetime | None
    released_by: str | None


@strawberry.type(description="A restart storm: automatic action on the cluster paused until an operator confirms.")
class StormPause:
    id: int
    cluster: str
    message: str
    jobs: list[int]
    started_at: dt.datetime
    confirmed_at: dt.datetime | None
    confirmed_by: str | None


@strawberry.type(description="Extra automatic restarts an operator granted to a workflow or a cluster.")
class BudgetExtension:
    cluster: str
    extra: int
    expires_at: dt.datetime
    created_by: str


def compute_node_of(row: Any, blames: list[Any]) -> ComputeNode:
    """The GraphQL view of a node standing and its blames."""
    return ComputeNode(row=row, blames=blames)


def hold_of(row: Any) -> RecoveryHold:
    """The GraphQL view of a budget hold."""
    return RecoveryHold(
        advice_id=strawberry.ID(to_global_id("Advice", row.advice_id)),
        cluster=row.cluster,
        job_id=row.slurm_job_id,
        attempt_index=row.attempt_index,
        budget=row.budget,
        message=row.message,
        created_at=row.created_at,
        released_at=row.released_at,
        released_by=row.released_by,
    )


def pause_of(row: Any) -> StormPause:
    """The GraphQL view of a storm pause."""
    return StormPause(
        id=row.id,
        cluster=row.cluster,
        message=row.message,
        jobs=list(row.jobs or ()),
        started_at=row.started_at,
        confirmed_at=row.confirmed_at,
        confirmed_by=row.confirmed_by,
    )


def extension_of(row: Any) -> BudgetExtension:
    """The GraphQL view of a budget extension."""
    return BudgetExtension(cluster=row.cluster, extra=row.extra, expires_at=row.expires_at, created_by=row.created_by)
