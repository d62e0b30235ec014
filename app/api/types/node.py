"""The Node interface and what every GraphQL object type shares: the request's DataLoaders, lazy references across modules."""

from __future__ import annotations

from typing import Annotated, Any

import strawberry

from app.api.ids import to_global_id

Info = strawberry.Info

# The jobs module imports the evidence, advice and audit types, so those refer back to it lazily.
AttemptRef = Annotated["Attempt", strawberry.lazy("app.api.types.jobs")]
WorkflowRef = Annotated["Workflow", strawberry.lazy("app.api.types.jobs")]


def loaders_of(info: Info) -> Any:
    """The DataLoaders of the request being resolved."""
    return info.context.loaders


@strawberry.interface(description="An object with an opaque global id, fetchable with `node(id:)` (Relay).")
class Node:
    row: strawberry.Private[Any]

    @strawberry.field(description="Opaque global id.")
    def id(self) -> strawberry.ID:
        return strawberry.ID(to_global_id(type(self).__name__, self.row.id))
