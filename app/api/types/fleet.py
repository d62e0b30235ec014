"""GraphQL types of fleet-wide trust: compute nodes and their reputation, budget holds, storm pauses."""

from __future__ import annotations

import datetime as dt
from typing import Any

import strawberry

from app.api.ids import to_global_id
from app.fleet.service import shown_state
from app.infra.db import utcnow


@strawberry.type(description="Hardware/infrastructure evidence that blamed a node in one attempt.")
class NodeEvidence:
    job_id: int = strawberry.field(description="Slurm job id.")
    attempt_index: int
    category: str | None = strawberry.field(description="Root-cause category, e.g. XID or NODE_FAIL.")
    outlook: str | None
    blamed_at: dt.datetime
    refs: list[str] = strawberry.field(description="Evidence references (anomaly:<id>, attempt_state:...).")


@strawberry.type(description="A compute node's standing on its cluster (named so: `Node` is the Relay interface).")
class ComputeNode:
    cluster: str
    name: str
    state: str = strawberry.field(description="OK, SUSPECT, PINNED (an operator), CLEARED (an operator) or EXPIRED.")
    excluded: bool = strawberry.field(description="Later Advice for any job on the cluster excludes this node.")
    suspect_until: dt.datetime | None = strawberry.field(description="When the suspicion expires unless renewed.")
    suspect_since: dt.datetime | None
    jobs: list[int] = strawberry.field(description="Slurm job ids whose evidence blamed it within the window.")
    pinned: bool
    changed_by: str | None = strawberry.field(description="The operator who last pinned, unpinned or cleared it.")
    drain_status: str | None = strawberry.field(description="SHADOW (observe), SENT, DRAINED, REFUSED or FAILED.")
    drain_message: str | None
    evidence: list[NodeEvidence]


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


def compute_node_of(row: Any, blames: list[Any], now: dt.datetime | None = None) -> ComputeNode:
    """The GraphQL view of a node standing and its blames."""
    now = now or utcnow()
    state = shown_state(row, now)
    return ComputeNode(
        cluster=row.cluster,
        name=row.node,
        state=state,
        excluded=state in ("SUSPECT", "PINNED"),
        suspect_until=row.suspect_until,
        suspect_since=row.suspect_since,
        jobs=list(row.jobs or ()),
        pinned=bool(row.pinned),
        changed_by=row.changed_by,
        drain_status=row.drain_status,
        drain_message=row.drain_message,
        evidence=[
            NodeEvidence(
                job_id=b.slurm_job_id,
                attempt_index=b.attempt_index,
                category=b.category,
                outlook=b.outlook,
                blamed_at=b.blamed_at,
                refs=[str(r) for r in (b.evidence or {}).get("refs", [])],
            )
            for b in blames
        ],
    )


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
