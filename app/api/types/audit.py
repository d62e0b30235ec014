"""GraphQL type of audit events: what a component saw or did."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import strawberry

from app.api.derive import graphql_fields
from app.api.types.node import Info, Node, WorkflowRef, workflow_of
from app.audit import read_model

if TYPE_CHECKING:  # row types for annotations only: the SQL lives in the areas' queries
    from app.audit.models import AuditEvent as AuditEventRow
else:  # strawberry resolves annotations at run time: a row is opaque to it
    AuditEventRow = Any


@graphql_fields(read_model.AUDIT_EVENT)
@strawberry.type(description="One thing a component saw or did (SPEC §7).")
class AuditEvent(Node):
    row: strawberry.Private[AuditEventRow]

    @strawberry.field
    async def workflow(self, info: Info) -> WorkflowRef | None:
        return await workflow_of(info, self.row.workflow_id)


def audit_event(row: AuditEventRow) -> AuditEvent:
    """The GraphQL object of one audit row (an ORM object or a Core row: anything with the columns as attributes)."""
    return AuditEvent(row=row)
