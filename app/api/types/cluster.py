"""GraphQL types of clusters: what is recorded per cluster and who runs its worker and watchdog."""

from __future__ import annotations

import datetime as dt
from typing import Any

import strawberry

from app.infra.db import utcnow
from app.leases.queries import ClusterOverview


@strawberry.type(description="Who holds a cluster's worker (or watchdog) lease; one holder acts at a time.")
class LeaseHolder:
    holder: str
    epoch: int
    acquired_at: dt.datetime
    renewed_at: dt.datetime
    expires_at: dt.datetime

    @strawberry.field(description="The lease has not expired: its holder is running.")
    def active(self) -> bool:
        return self.expires_at > utcnow()


@strawberry.type(description="One Slurm cluster of this installation (each has its own worker under its own lease).")
class Cluster:
    name: str
    job_count: int = strawberry.field(description="Job records on this cluster (enrolled or not).")
    enrolled_job_count: int
    workflow_count: int
    worker: LeaseHolder | None = strawberry.field(description="The worker's lease; null before a worker started.")
    watchdog: LeaseHolder | None = strawberry.field(
        description="The separate watchdog's lease (RECOVERY_WATCHDOG_PROCESS=separate); null otherwise."
    )


def lease_holder(row: Any) -> LeaseHolder | None:
    """The GraphQL view of a lease row (app.leases.queries returns them; api modules import no models)."""
    if row is None:
        return None
    return LeaseHolder(
        holder=row.holder,
        epoch=row.epoch,
        acquired_at=row.acquired_at,
        renewed_at=row.renewed_at,
        expires_at=row.expires_at,
    )


def cluster_of(overview: ClusterOverview) -> Cluster:
    """The GraphQL view of one cluster overview."""
    return Cluster(
        name=overview.name,
        job_count=overview.counts.jobs,
        enrolled_job_count=overview.counts.enrolled_jobs,
        workflow_count=overview.counts.workflows,
        worker=lease_holder(overview.worker),
        watchdog=lease_holder(overview.watchdog),
    )
