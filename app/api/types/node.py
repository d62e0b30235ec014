"""The Node interface and what every GraphQL object type shares: the request's DataLoaders, lazy references
across modules."""

from __future__ import annotations

from typing import Annotated, Any

import strawberry

from app.api.ids import to_global_id
from app.domain.admission.mode import ModeDecision, effective_mode

Info = strawberry.Info

# The jobs module imports the evidence, advice and audit types, so those refer back to it lazily: by name in
# annotations, and through REGISTRY (filled by app.api.types.jobs) when a resolver builds one. No import
# goes from here to a type module, so the types form no import circle.
AttemptRef = Annotated["Attempt", strawberry.lazy("app.api.types.jobs")]  # type: ignore[name-defined]  # noqa: F821
WorkflowRef = Annotated["Workflow", strawberry.lazy("app.api.types.jobs")]  # type: ignore[name-defined]  # noqa: F821
REGISTRY: dict[str, Any] = {}


def register(cls: Any) -> Any:
    """Class decorator: make a type buildable by name from resolvers of other type modules."""
    REGISTRY[cls.__name__] = cls
    return cls


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


async def workflow_of(info: Info, workflow_id: int | None) -> Any:
    """The Workflow a row belongs to, through the request's batched loader (None when it has none)."""
    if workflow_id is None:
        return None
    row = await loaders_of(info).workflow.load(workflow_id)
    return REGISTRY["Workflow"](row=row) if row else None


async def attempt_of(info: Info, attempt_id: int) -> Any:
    """The Attempt a row belongs to, through the request's batched loader."""
    return REGISTRY["Attempt"](row=await loaders_of(info).attempt.load(attempt_id))
