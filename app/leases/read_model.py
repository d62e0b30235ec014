"""Read models of clusters and their leases: their fields as the GraphQL and REST APIs show them."""

from __future__ import annotations

import datetime as dt

from app.infra.db import utcnow
from app.infra.read_model_fields import Field, Given, ReadModel, Resolved

LEASE = ReadModel(
    "LeaseHolder",
    (
        Field("holder", str),
        Field("epoch", int),
        Field("acquired_at", dt.datetime),
        Field("renewed_at", dt.datetime),
        Field("expires_at", dt.datetime),
        Field(
            "active",
            bool,
            source=lambda row: row.expires_at > utcnow(),
            description="The lease has not expired: its holder is running.",
        ),
    ),
)

# Of a ClusterOverview (app.leases.queries); the leases are objects of their own (GraphQL LeaseHolder, REST nested).
CLUSTER = ReadModel(
    "Cluster",
    (
        Field("name", str),
        Field(
            "job_count",
            int,
            source=lambda row: row.counts.jobs,
            description="Job records on this cluster (enrolled or not).",
        ),
        Field("enrolled_job_count", int, source=lambda row: row.counts.enrolled_jobs),
        Field("workflow_count", int, source=lambda row: row.counts.workflows),
        Resolved("worker"),
        Field("worker", dict, nullable=True, graphql=False, source=Given),
        Resolved("watchdog"),
        Field("watchdog", dict, nullable=True, graphql=False, source=Given),
    ),
)
