"""Read model of audit events: their fields as the GraphQL and REST APIs show them."""

from __future__ import annotations

import datetime as dt
from typing import Any

from app.audit.service import LEVELS
from app.infra.read_model_fields import Field, GlobalId, ReadModel

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _micros(row: Any) -> int:
    delta = row.produced_at - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


AUDIT_EVENT = ReadModel(
    "AuditEvent",
    (
        Field("id", GlobalId, description="Opaque global id.", rest=False),
        Field("row_id", int, source="id", graphql=False, rest_name="id"),
        Field(
            "component",
            str,
            description="collector, watcher, job_manager, advisor, controller, watchdog, api, observer.",
        ),
        Field("event_type", str, description="Stable dotted type, e.g. attempt.registered."),
        Field("level", str, description="DEBUG, INFO, WARNING or ERROR.", choices=LEVELS),
        Field("message", str),
        Field("payload", dict),
        Field("cluster", str, nullable=True),
        Field(
            "job_id",
            int,
            nullable=True,
            source="slurm_job_id",
            description="The Slurm job id, where the event is about a job.",
        ),
        Field("attempt_index", int, nullable=True),
        Field("actor", str, nullable=True, description="The user behind an api event."),
        Field("produced_at", dt.datetime, description="When the producer saw or did it."),
        Field("produced_at_micros", int, source=_micros, graphql=False),
        Field("recorded_at", dt.datetime, description="When it was stored."),
    ),
)
