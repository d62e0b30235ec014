"""GraphQL types of Advice and its reconciliation: the decision, the controller's report and its scheduler actions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import strawberry

from app.advice import read_model
from app.api.derive import graphql_fields
from app.api.types.node import AttemptRef, Info, Node, attempt_of, loaders_of, mode_now

if TYPE_CHECKING:  # row types for annotations only: the SQL lives in the areas' queries
    from app.advice.models import Advice as AdviceRow
    from app.advice.models import SchedulerAction
else:  # strawberry resolves annotations at run time: a row is opaque to it
    AdviceRow = Any
    SchedulerAction = Any


@graphql_fields(read_model.SCHEDULER_ACTION)
@strawberry.type(
    description="One scheduler command (or its observe-mode shadow) taken to reconcile an Advice generation."
)
class Milestone:
    row: strawberry.Private[SchedulerAction]


@graphql_fields(read_model.RECONCILIATION)
@strawberry.type(description="The controller's report on an Advice: did Slurm get to the desired state?")
class Reconciliation:
    row: strawberry.Private[AdviceRow]

    @strawberry.field(description="Scheduler actions in the order they were taken.")
    async def milestones(self, info: Info) -> list[Milestone]:
        return [Milestone(row=row) for row in await loaders_of(info).milestones.load(self.row.id)]


@graphql_fields(read_model.ADVICE)
@strawberry.type(description="The durable decision about one attempt: restart (with node exclusions) or terminate.")
class Advice(Node):
    row: strawberry.Private[AdviceRow]

    @strawberry.field(
        description="observe or act NOW: its job's mode under the operator's current settings, as the controller "
        "applies it (modeAtDecision is the mode it was decided under)."
    )
    async def mode(self, info: Info) -> str:
        job = await loaders_of(info).job.load(self.row.job_id)
        return mode_now(info, job).mode if job else self.row.mode

    @strawberry.field(description="Why mode applies now.")
    async def mode_reason(self, info: Info) -> str | None:
        job = await loaders_of(info).job.load(self.row.job_id)
        return mode_now(info, job).reason if job else self.row.mode_reason

    @strawberry.field(
        description="The Advice an operator decided again now in place of this one (this one was decided in observe "
        "mode and is never carried out)."
    )
    async def decided_again_as(self, info: Info) -> Advice | None:
        if self.row.superseded_by_id is None:
            return None
        row = await loaders_of(info).advice.load(self.row.superseded_by_id)
        return Advice(row=row) if row is not None else None

    @strawberry.field(description="The observe-mode Advice this one decided again (an operator's decide again now).")
    async def decided_again_from(self, info: Info) -> Advice | None:
        if self.row.supersedes_id is None:
            return None
        row = await loaders_of(info).advice.load(self.row.supersedes_id)
        return Advice(row=row) if row is not None else None

    @strawberry.field
    def reconciliation(self) -> Reconciliation:
        return Reconciliation(row=self.row)

    @strawberry.field
    async def attempt(self, info: Info) -> AttemptRef:
        return await attempt_of(info, self.row.attempt_id)


@graphql_fields(read_model.NEED)
@strawberry.type(description="One line of the operator's \"Needs you\" list (the dashboard's home page).")
class Need:
    row: strawberry.Private[Any]


@graphql_fields(read_model.OPERATOR_DAY)
@strawberry.type(
    description="The operator's day: what happened in a time range and what needs someone, the same read as the "
    "dashboard's home page (/dashboard)."
)
class OperatorDay:
    row: strawberry.Private[Any]

    @strawberry.field(description="What waits for a person: storms, held restarts, suspect nodes, likely typos, stops.")
    def needs_you(self) -> list[Need]:
        return [Need(row=need) for need in self.row.needs]
