"""Read side of fleet-wide trust: budget use, open holds and pauses, node blames and standings."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.advice.models import Advice
from app.fleet.models import BudgetExtension, ClusterPause, NodeBlame, NodeStanding, RecoveryHold, RestartGrant
from app.jobs.models import Job, Workflow

MAX_LIST = 500


async def grant_of(session: AsyncSession, *, advice_id: int) -> RestartGrant | None:
    """The restart grant of an Advice, if the controller was allowed to begin it."""
    return await session.scalar(select(RestartGrant).where(RestartGrant.advice_id == advice_id))


async def grants_since(
    session: AsyncSession, *, cluster: str, since: dt.datetime, workflow_id: int | None = None
) -> int:
    """Automatic restarts begun on the cluster (or one workflow of it) since a time."""
    query = select(func.count()).select_from(RestartGrant).where(RestartGrant.granted_at >= since)
    query = query.where(RestartGrant.cluster == cluster)
    if workflow_id is not None:
        query = query.where(RestartGrant.workflow_id == workflow_id)
    return int(await session.scalar(query) or 0)


async def extra_restarts(session: AsyncSession, *, cluster: str, workflow_id: int | None, now: dt.datetime) -> int:
    """Restarts operators added to a workflow's (workflow_id) or the cluster's (None) budget, still valid now."""
    query = select(func.coalesce(func.sum(BudgetExtension.extra), 0)).where(
        BudgetExtension.cluster == cluster, BudgetExtension.expires_at > now
    )
    query = query.where(
        BudgetExtension.workflow_id == workflow_id if workflow_id is not None else BudgetExtension.workflow_id.is_(None)
    )
    return int(await session.scalar(query) or 0)


async def hold_of(session: AsyncSession, *, advice_id: int) -> RecoveryHold | None:
    """The budget hold of an Advice, released or not."""
    return await session.scalar(select(RecoveryHold).where(RecoveryHold.advice_id == advice_id))


async def holds(
    session: AsyncSession, *, cluster: str | None = None, only_open: bool = True, limit: int = MAX_LIST
) -> list[RecoveryHold]:
    """Budget holds, newest first (open ones only by default)."""
    return await _newest(session, RecoveryHold, RecoveryHold.released_at, cluster, only_open, limit)


async def open_pause(session: AsyncSession, *, cluster: str) -> ClusterPause | None:
    """The cluster's unconfirmed storm pause, if any."""
    return await session.scalar(
        select(ClusterPause)
        .where(ClusterPause.cluster == cluster, ClusterPause.confirmed_at.is_(None))
        .order_by(ClusterPause.id.desc())
        .limit(1)
    )


async def last_confirmed_at(session: AsyncSession, *, cluster: str) -> dt.datetime | None:
    """When an operator last confirmed a storm on the cluster (failures before it no longer count)."""
    return await session.scalar(select(func.max(ClusterPause.confirmed_at)).where(ClusterPause.cluster == cluster))


async def pauses(
    session: AsyncSession, *, cluster: str | None = None, only_open: bool = True, limit: int = 50
) -> list[ClusterPause]:
    """Storm pauses, newest first (unconfirmed ones only by default)."""
    return await _newest(session, ClusterPause, ClusterPause.confirmed_at, cluster, only_open, limit)


async def _newest(
    session: AsyncSession, model: Any, closed_at: Any, cluster: str | None, only_open: bool, limit: int
) -> list[Any]:
    """Holds or pauses, newest first: of one cluster when named, open (`closed_at` unset) when asked."""
    query = select(model).order_by(model.id.desc()).limit(min(limit, MAX_LIST))
    if cluster:
        query = query.where(model.cluster == cluster)
    if only_open:
        query = query.where(closed_at.is_(None))
    return list((await session.scalars(query)).all())


async def failing_jobs_since(session: AsyncSession, *, cluster: str, since: dt.datetime) -> list[int]:
    """Slurm job ids of the distinct jobs whose failures got Advice on the cluster since a time."""
    rows = await session.execute(
        select(Advice.job_id, func.min(Advice.slurm_job_id))
        .where(Advice.cluster == cluster, Advice.created_at >= since)
        .group_by(Advice.job_id)
        .limit(10_000)
    )
    return sorted(int(slurm_id) for _, slurm_id in rows.all())


async def workflow_of_job(session: AsyncSession, *, job_id: int) -> tuple[int | None, str | None]:
    """The workflow id and key of a job (None, None without one)."""
    row = (
        await session.execute(
            select(Job.workflow_id, Workflow.workflow_key)
            .outerjoin(Workflow, Workflow.id == Job.workflow_id)
            .where(Job.id == job_id)
        )
    ).first()
    return (row[0], row[1]) if row else (None, None)


async def workflow_id_by_key(session: AsyncSession, *, cluster: str, key: str) -> int | None:
    """A workflow's id from its key on a cluster."""
    return await session.scalar(select(Workflow.id).where(Workflow.cluster == cluster, Workflow.workflow_key == key))


async def blames_of_node(session: AsyncSession, *, cluster: str, node: str, limit: int = MAX_LIST) -> list[NodeBlame]:
    """A node's blames on a cluster, oldest first."""
    return list(
        (
            await session.scalars(
                select(NodeBlame)
                .where(NodeBlame.cluster == cluster, NodeBlame.node == node)
                .order_by(NodeBlame.blamed_at, NodeBlame.id)
                .limit(limit)
            )
        ).all()
    )


async def blames_of_nodes(
    session: AsyncSession, *, cluster: str, nodes: Sequence[str], limit: int = MAX_LIST
) -> dict[str, list[NodeBlame]]:
    """Blames of several nodes (newest `limit` in all), per node, oldest first."""
    if not nodes:
        return {}
    rows = (
        await session.scalars(
            select(NodeBlame)
            .where(NodeBlame.cluster == cluster, NodeBlame.node.in_(list(nodes)))
            .order_by(NodeBlame.id.desc())
            .limit(limit)
        )
    ).all()
    out: dict[str, list[NodeBlame]] = {}
    for row in reversed(rows):
        out.setdefault(row.node, []).append(row)
    return out


async def blame_exists(session: AsyncSession, *, cluster: str, node: str, attempt_id: int) -> bool:
    """True when this attempt already blamed this node."""
    found = await session.scalar(
        select(NodeBlame.id).where(
            NodeBlame.cluster == cluster, NodeBlame.node == node, NodeBlame.attempt_id == attempt_id
        )
    )
    return found is not None


async def standing(session: AsyncSession, *, cluster: str, node: str) -> NodeStanding | None:
    """One node's standing row."""
    return await session.scalar(select(NodeStanding).where(NodeStanding.cluster == cluster, NodeStanding.node == node))


async def standings(
    session: AsyncSession, *, cluster: str | None = None, state: str | None = None, limit: int = MAX_LIST
) -> list[NodeStanding]:
    """Node standings (every node any evidence blamed), by cluster and node name."""
    query = select(NodeStanding).order_by(NodeStanding.cluster, NodeStanding.node).limit(min(limit, MAX_LIST))
    if cluster:
        query = query.where(NodeStanding.cluster == cluster)
    if state:
        query = query.where(NodeStanding.state == state)
    return list((await session.scalars(query)).all())


async def suspect_nodes(session: AsyncSession, *, cluster: str, now: dt.datetime) -> tuple[str, ...]:
    """Nodes later Advice on the cluster excludes: pinned by an operator, or suspect until after now."""
    rows = await session.scalars(
        select(NodeStanding.node).where(
            NodeStanding.cluster == cluster,
            (NodeStanding.pinned.is_(True)) | (NodeStanding.suspect_until > now),
        )
    )
    return tuple(sorted(rows.all()))


async def drained_nodes(session: AsyncSession, *, cluster: str) -> list[NodeStanding]:
    """Nodes Recovery drained (or sent a drain to) on the cluster."""
    return list(
        (
            await session.scalars(
                select(NodeStanding).where(
                    NodeStanding.cluster == cluster, NodeStanding.drain_status.in_(["SENT", "DRAINED"])
                )
            )
        ).all()
    )


async def node_overview(
    session: AsyncSession, *, cluster: str | None = None, state: str | None = None, limit: int = MAX_LIST
) -> list[tuple[NodeStanding, list[NodeBlame]]]:
    """Every node evidence blamed (or an operator pinned), with its blames, for the Nodes view and GraphQL."""
    rows = await standings(session, cluster=cluster, limit=limit)
    by_cluster: dict[str, list[str]] = {}
    for row in rows:
        by_cluster.setdefault(row.cluster, []).append(row.node)
    blames: dict[tuple[str, str], list[NodeBlame]] = {}
    for name, nodes in by_cluster.items():
        for node, found in (await blames_of_nodes(session, cluster=name, nodes=nodes)).items():
            blames[(name, node)] = found
    return [(row, blames.get((row.cluster, row.node), [])) for row in rows]


async def drain_candidates(session: AsyncSession, *, cluster: str, now: dt.datetime) -> list[NodeStanding]:
    """Suspect or pinned nodes whose drain is not done yet (no record, a shadow, sent, refused or failed)."""
    rows = await session.scalars(
        select(NodeStanding)
        .where(NodeStanding.cluster == cluster)
        .where((NodeStanding.pinned.is_(True)) | (NodeStanding.suspect_until > now))
        .where(NodeStanding.drain_status.is_(None) | (NodeStanding.drain_status != "DRAINED"))
        .order_by(NodeStanding.id)
        .limit(100)
    )
    return list(rows.all())


async def node_partition(session: AsyncSession, *, cluster: str, node: str) -> str | None:
    """The partition of the newest job whose evidence blamed the node (the partition its drain is counted in)."""
    partition = await session.scalar(
        select(Job.partition)
        .join(NodeBlame, NodeBlame.job_id == Job.id)
        .where(NodeBlame.cluster == cluster, NodeBlame.node == node, Job.partition.is_not(None))
        .order_by(NodeBlame.id.desc())
        .limit(1)
    )
    return partition.split(",")[0].strip() if partition else None
