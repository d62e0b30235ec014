"""The Node interface and what every GraphQL object type shares: the request's DataLoaders, lazy references across modules."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import strawberry

from app.api.ids import to_global_id
from app.domain.mode import ModeDecision, effective_mode

if TYPE_CHECKING:
    from app.api.types.jobs import Attempt, Workflow

Info = strawberry.Info

# The jobs module imports the evidence, advice and audit types, so those refer back to it lazily.
AttemptRef = Annotated["Attempt", strawberry.lazy("app.api.types.jobs")]
WorkflowRef = Annotated["Workflow", strawberry.lazy("app.api.types.jobs")]


def loaders_of(info: Info) -> Any:
    """The DataLoaders of the request being resolved."""
    return info.context.loaders


def mode_now(info: Info, job: Any) -> ModeDecision:
    """The job's mode under the operator's settings now (the same answer the advisor and controller use)."""
    return effective_mode(job, info.context.app.settings)


@strawberry.interface(description="An object with an opaque global id, fetchable with `node(id:)` (Relay).")
class Node:
    row: strawberry.Private[Any]

    @strawberry.field(description="Opaque global id.")
    def id(self) -> strawberry.ID:
        return strawberry.ID(to_global_id(type(self).__name__, self.row.id))


async def workflow_of(info: Info, workflow_id: int | None) -> Workflow | None:
    """The workflow a row belongs to, through the request's batched loader (None when it has none)."""
    from app.api.types.jobs import Workflow  # deferred: app.api.types.jobs imports this module

    if workflow_id is None:
        return None
    row = await loaders_of(info).workflow.load(workflow_id)
    return Workflow(row=row) if row else None


async def attempt_of(info: Info, attempt_id: int) -> Attempt:
    """The attempt a row belongs to, through the request's batched loader."""
    from app.api.types.jobs import Attempt  # deferred: app.api.types.jobs imports this module

    return Attempt(row=await loaders_of(info).attempt.load(attempt_id))
