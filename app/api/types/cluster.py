"""GraphQL types of clusters: what is recorded per cluster and who runs its worker and watchdog."""

from __future__ import annotations

from typing import Any

import strawberry

from app.api.derive import graphql_fields
from app.leases import read_model
from app.leases.queries import ClusterOverview


@graphql_fields(read_model.LEASE)
@strawberry.type(description="Who holds a cluster's worker (or watchdog) lease; one holder acts at a time.")
class LeaseHolder:
    row: strawberry.Private[Any]


@graphql_fields(read_model.CLUSTER)
@strawberry.type(description="One Slurm cluster of this installation (each has its own worker under its own lease).")
class Cluster:
    row: strawberry.Private[ClusterOverview]

    @strawberry.field(description="The worker's lease; null before a worker started.")
    def worker(self) -> LeaseHolder | None:
        return lease_holder(self.row.worker)

    @strawberry.field(description="The separate watchdog's lease (RECOVERY_WATCHDOG_PROCESS=separate); null otherwise.")
    def watchdog(self) -> LeaseHolder | None:
        return lease_holder(self.row.watchdog)


def lease_holder(row: Any) -> LeaseHolder | None:
    """The GraphQL view of a lease row (app.leases.queries returns them; api modules import no models)."""
    return LeaseHolder(row=row) if row is not None else None


def cluster_of(overview: ClusterOverview) -> Cluster:
    """The GraphQL view of one cluster overview."""
    return Cluster(row=overview)
