"""GraphQL types of the evidence read from attempt logs: checkpoints and anomalies."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

import strawberry
from strawberry.scalars import JSON

from app.api.types.node import AttemptRef, Info, Node, attempt_of
from app.evidence.queries import AFTER_RECOVERY_ACTED

if TYPE_CHECKING:  # row types for annotations only: the SQL lives in the areas' queries
    from app.evidence.models import Anomaly as AnomalyRow
    from app.evidence.models import Checkpoint as CheckpointRow
else:  # strawberry resolves annotations at run time: a row is opaque to it
    AnomalyRow = Any
    CheckpointRow = Any


@strawberry.type(description="A checkpoint saved/loaded/failed line recognised in an attempt's log.")
class Checkpoint(Node):
    row: strawberry.Private[CheckpointRow]

    @strawberry.field(description="saved, loaded or failed.")
    def kind(self) -> str:
        return self.row.kind

    @strawberry.field
    def framework(self) -> str | None:
        return self.row.framework

    @strawberry.field
    def iteration(self) -> int | None:
        return self.row.iteration

    @strawberry.field(description="The checkpoint's path as the log line names it.")
    def path(self) -> str | None:
        return self.row.path

    @strawberry.field
    def log_path(self) -> str | None:
        return self.row.log_path

    @strawberry.field
    def line_number(self) -> int | None:
        return self.row.line_number

    @strawberry.field
    def line(self) -> str | None:
        return self.row.line

    @strawberry.field(description="Timestamp parsed from the log line, when it had one.")
    def source_time(self) -> dt.datetime | None:
        return self.row.source_time

    @strawberry.field
    def read_time(self) -> dt.datetime:
        return self.row.read_time

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


@strawberry.type(
    description="Something wrong with an attempt: a crash line, no progress, a slowdown, a scheduler failure."
)
class Anomaly(Node):
    row: strawberry.Private[AnomalyRow]

    @strawberry.field(
        description="CRASH, NO_PROGRESS, SLOWDOWN or SCHEDULER_FAILURE; AFTER_RECOVERY_ACTED for a crash line "
        "printed after Recovery sent requeue-hold or cancel (kept apart, never decided on)."
    )
    def kind(self) -> str:
        return self.row.kind

    @strawberry.field
    def category(self) -> str:
        return self.row.category

    @strawberry.field
    def detector(self) -> str:
        return self.row.detector

    @strawberry.field
    def message(self) -> str | None:
        return self.row.message

    @strawberry.field(description="The node the evidence names, if any.")
    def node(self) -> str | None:
        return self.row.node

    @strawberry.field
    def xid(self) -> int | None:
        return self.row.xid

    @strawberry.field(
        description="Retry outlook of a crash: infrastructure (retry excluding blamed nodes), transient (retry "
        "without exclusion) or application (a deterministic error in the program); null for other kinds."
    )
    def outlook(self) -> str | None:
        return self.row.outlook

    @strawberry.field(
        description="Nodes this crash blames, with provenance; only infrastructure evidence blames a node."
    )
    def blamed_nodes(self) -> list[BlamedNode]:
        return [
            BlamedNode(node=str(e.get("node")), provenance=str(e.get("provenance")), detail=e.get("detail"))
            for e in (self.row.blamed_nodes or [])
            if isinstance(e, dict) and e.get("node")
        ]

    @strawberry.field(
        description="This crash's place in its attempt's failure: 'root cause' (the line the failure started "
        "from), 'consequence' (another process reporting it, Slurm ending the step) or 'after Recovery acted' "
        "(printed after Recovery sent requeue-hold or cancel: kept, never decided on); null until decided "
        "and for other kinds."
    )
    def role(self) -> str | None:
        if self.row.kind == AFTER_RECOVERY_ACTED:
            return "after Recovery acted"
        role = (self.row.details or {}).get("role")
        return str(role) if role else None

    @strawberry.field(
        description="Short stable id of the failure fingerprint ('fp-3f2a9c0b1d4e'): the same on a rerun that "
        "fails the same way (timestamps, PIDs, ports, addresses, ranks and log prefixes do not count)."
    )
    def fingerprint(self) -> str | None:
        value = (self.row.details or {}).get("fingerprint")
        return str(value) if value else None

    @strawberry.field(description="The fingerprint's text: category and the normalised origin line.")
    def fingerprint_text(self) -> str | None:
        value = (self.row.details or {}).get("signature")
        return str(value) if value else None

    @strawberry.field
    def log_path(self) -> str | None:
        return self.row.log_path

    @strawberry.field
    def line_number(self) -> int | None:
        return self.row.line_number

    @strawberry.field
    def line(self) -> str | None:
        return self.row.line

    @strawberry.field
    def source_time(self) -> dt.datetime | None:
        return self.row.source_time

    @strawberry.field
    def details(self) -> JSON:
        return JSON(self.row.details or {})

    @strawberry.field
    def detected_at(self) -> dt.datetime:
        return self.row.detected_at

    @strawberry.field
    async def attempt(self, info: Info) -> AttemptRef:
        return await attempt_of(info, self.row.attempt_id)
