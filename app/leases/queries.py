"""Read side of the worker leases: who holds one, under which epoch, until when; who runs each cluster."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.infra.db import utcnow
from app.jobs.queries import ClusterCounts, cluster_counts
from app.leases.models import WorkerLease, WorkerPosition


@dataclass(frozen=True)
class LeaseState:
    """What a holder knows after trying: whether it holds the lease and under which epoch."""

    held: bool
    holder: str | None
    epoch: int | None
    expires_at: dt.datetime | None


async def current(sessions: async_sessionmaker[AsyncSession], *, name: str, holder: str) -> LeaseState:
    """The lease as stored, from `holder`'s point of view."""
    async with sessions() as session:
        lease = await session.scalar(select(WorkerLease).where(WorkerLease.name == name))
        if lease is None:
            return LeaseState(False, None, None, None)
        return LeaseState(
            lease.holder == holder and lease.expires_at > utcnow(), lease.holder, lease.epoch, lease.expires_at
        )


async def load_positions(session: AsyncSession, *, names: Sequence[str]) -> dict[str, int]:
    """Stored reader positions by name (absent names were never saved)."""
    rows = (await session.scalars(select(WorkerPosition).where(WorkerPosition.name.in_(list(names))))).all()
    return {row.name: row.position for row in rows}


async def leases_of_clusters(
    session: AsyncSession, *, clusters: Sequence[str], roles: Sequence[str] = ("worker", "watchdog")
) -> dict[tuple[str, str], WorkerLease]:
    """{(cluster, role): lease} for the `role:cluster` leases that exist, in one statement."""
    names = {f"{role}:{cluster}": (cluster, role) for cluster in clusters for role in roles}
    if not names:
        return {}
    rows = (await session.scalars(select(WorkerLease).where(WorkerLease.name.in_(list(names))))).all()
    return {names[row.name]: row for row in rows}


async def worker_leases(session: AsyncSession, *, role: str = "worker") -> dict[str, WorkerLease]:
    """{cluster: its `role` lease} for every cluster whose worker ever held one, in one statement."""
    prefix = f"{role}:"
    rows = (await session.scalars(select(WorkerLease).where(WorkerLease.name.like(f"{prefix}%")))).all()
    return {row.name[len(prefix) :]: row for row in rows}


async def lease_clusters(session: AsyncSession, *, role: str = "worker") -> list[str]:
    """Clusters that have (or had) a lease for `role`: a worker that has started but seen no job yet."""
    prefix = f"{role}:"
    rows = (await session.scalars(select(WorkerLease.name).where(WorkerLease.name.like(f"{prefix}%")))).all()
    return sorted(name[len(prefix) :] for name in rows)


@dataclass(frozen=True)
class ClusterOverview:
    """One cluster: what is recorded of it and who holds its worker and watchdog leases."""

    counts: ClusterCounts
    worker: WorkerLease | None
    watchdog: WorkerLease | None

    @property
    def name(self) -> str:
        return self.counts.cluster


async def cluster_overview(session: AsyncSession, *, cluster: str | None = None) -> list[ClusterOverview]:
    """Every cluster (with recorded jobs, or a worker that ever held its lease), by name: three statements."""
    counts = await cluster_counts(session)
    for name in await lease_clusters(session):
        counts.setdefault(name, ClusterCounts(cluster=name))
    names = sorted(name for name in counts if cluster is None or name == cluster)
    leases = await leases_of_clusters(session, clusters=names)
    return [
        ClusterOverview(
            counts=counts[name], worker=leases.get((name, "worker")), watchdog=leases.get((name, "watchdog"))
        )
        for name in names
    ]
