"""GraphQL types of the evidence read from attempt logs: checkpoints and anomalies."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import strawberry

from app.api.derive import graphql_fields
from app.api.types.node import AttemptRef, Info, Node, attempt_of
from app.evidence import read_model

if TYPE_CHECKING:  # row types for annotations only: the SQL lives in the areas' queries
    from app.evidence.models import Anomaly as AnomalyRow
    from app.evidence.models import Checkpoint as CheckpointRow
    from app.evidence.models import StackCapture as StackCaptureRow
else:  # strawberry resolves annotations at run time: a row is opaque to it
    AnomalyRow = Any
    CheckpointRow = Any
    StackCaptureRow = Any


@graphql_fields(read_model.CHECKPOINT)
@strawberry.type(description="A checkpoint saved/loaded/failed line recognised in an attempt's log.")
class Checkpoint(Node):
    row: strawberry.Private[CheckpointRow]

    @strawberry.field
    async def attempt(self, info: Info) -> AttemptRef:
        return await attempt_of(info, self.row.attempt_id)


@strawberry.type(description="A node the evidence blames, and how that was derived.")
class BlamedNode:
    node: str
    provenance: str = strawberry.field(
        description="line (the line names the host), rank (a rank mapped through the attempt's node list and task "
        "layout) or allocation (the attempt ran on this node only)."
    )
    detail: str | None = None


@graphql_fields(read_model.ANOMALY)
@strawberry.type(
    description="Something wrong with an attempt: a crash line, no progress, a slowdown, a scheduler failure."
)
class Anomaly(Node):
    row: strawberry.Private[AnomalyRow]

    @strawberry.field(
        description="Nodes this crash blames, with provenance; only infrastructure evidence blames a node."
    )
    def blamed_nodes(self) -> list[BlamedNode]:
        return [
            BlamedNode(node=str(e.get("node")), provenance=str(e.get("provenance")), detail=e.get("detail"))
            for e in (self.row.blamed_nodes or [])
            if isinstance(e, dict) and e.get("node")
        ]

    @strawberry.field
    async def attempt(self, info: Info) -> AttemptRef:
        return await attempt_of(info, self.row.attempt_id)


@graphql_fields(read_model.STACK_CAPTURE)
@strawberry.type(
    description="Every rank's stack, state and wait channel (py-spy, /proc, nvidia-smi, NCCL flight recorder), taken "
    "right before Recovery ended a hung, stalled or partly failed RUNNING attempt, with the merged stacks and the "
    "rank that held the others back."
)
class StackCapture(Node):
    row: strawberry.Private[StackCaptureRow]

    @strawberry.field
    async def attempt(self, info: Info) -> AttemptRef:
        return await attempt_of(info, self.row.attempt_id)
