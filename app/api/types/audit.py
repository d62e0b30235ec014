"""GraphQL type of audit events: what a component saw or did."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

import strawberry
from strawberry.scalars import JSON

from app.api.types.node import Info, Node, WorkflowRef, workflow_of

if TYPE_CHECKING:  # row types for annotations only: the SQL lives in the areas' queries
    from app.audit.models import AuditEvent as AuditEventRow
else:  # strawberry resolves annotations at run time: a row is opaque to it
    AuditEventRow = Any


@strawberry.type(description="One thing a component saw or did (SPEC §7).")
class AuditEvent(Node):
    row: strawberry.Private[AuditEventRow]

    @strawberry.field(description="collector, watcher, job_manager, advisor, controller, watchdog, api, observer.")
    def component(self) -> str:
        return self.row.component

    @strawberry.field(description="Stable dotted type, e.g. attempt.registered.")
    def event_type(self) -> str:
        return self.row.event_type

    @strawberry.field(description="DEBUG, INFO, WARNING or ERROR.")
    def level(self) -> str:
        return self.row.level

    @strawberry.field
    def message(self) -> str:
        return self.row.message

    @strawberry.field
    def payload(self) -> JSON:
        return JSON(self.row.payload or {})

    @strawberry.field
    def cluster(self) -> str | None:
        return self.row.cluster

    @strawberry.field(description="The Slurm job id, where the event is about a job.")
    def job_id(self) -> int | None:
        return self.row.slurm_job_id

    @strawberry.field
    def attempt_index(self) -> int | None:
        return self.row.attempt_index

    @strawberry.field(description="The user behind an api event.")
    def actor(self) -> str | None:
        return self.row.actor

    @strawberry.field(description="When the producer saw or did it.")
    def produced_at(self) -> dt.datetime:
        return self.row.produced_at

    @strawberry.field(description="When it was stored.")
    def recorded_at(self) -> dt.datetime:
        return self.row.recorded_at

    @strawberry.field
    async def workflow(self, info: Info) -> WorkflowRef | None:
        return await workflow_of(info, self.row.workflow_id)
