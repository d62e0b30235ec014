"""GraphQL type of audit events: what a component saw or did."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

import strawberry
from strawberry.scalars import JSON

from app.api.ids import to_global_id
from app.api.types.node import Info, Node, WorkflowRef, workflow_of

if TYPE_CHECKING:  # row types for annotations only: the SQL lives in the areas' queries
    from app.audit.models import AuditEvent as AuditEventRow
else:  # strawberry resolves annotations at run time: a row is opaque to it
    AuditEventRow = Any


@strawberry.type(description="One thing a component saw or did (SPEC §7).")
class AuditEvent(Node):
    # Plain attributes, copied from the row once (`audit_event(row)`): strawberry serves them without a resolver call
    # each, which is most of the cost of a page of 100 events (app/api/execution.py serves such objects in one loop).
    id: strawberry.ID = strawberry.field(description="Opaque global id.")
    component: str = strawberry.field(
        description="collector, watcher, job_manager, advisor, controller, watchdog, api, observer."
    )
    event_type: str = strawberry.field(description="Stable dotted type, e.g. attempt.registered.")
    level: str = strawberry.field(description="DEBUG, INFO, WARNING or ERROR.")
    message: str
    payload: JSON
    cluster: str | None
    job_id: int | None = strawberry.field(description="The Slurm job id, where the event is about a job.")
    attempt_index: int | None
    actor: str | None = strawberry.field(description="The user behind an api event.")
    produced_at: dt.datetime = strawberry.field(description="When the producer saw or did it.")
    recorded_at: dt.datetime = strawberry.field(description="When it was stored.")

    @strawberry.field
    async def workflow(self, info: Info) -> WorkflowRef | None:
        return await workflow_of(info, self.row.workflow_id)


def audit_event(row: AuditEventRow) -> AuditEvent:
    """The GraphQL object of one audit row (an ORM object or a Core row: anything with the columns as attributes)."""
    return AuditEvent(
        row=row,
        id=strawberry.ID(to_global_id("AuditEvent", row.id)),
        component=row.component,
        event_type=row.event_type,
        level=row.level,
        message=row.message,
        payload=JSON(row.payload or {}),
        cluster=row.cluster,
        job_id=row.slurm_job_id,
        attempt_index=row.attempt_index,
        actor=row.actor,
        produced_at=row.produced_at,
        recorded_at=row.recorded_at,
    )
