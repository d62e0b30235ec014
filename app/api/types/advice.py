"""GraphQL types of Advice and its reconciliation: the decision, the controller's report and its scheduler actions."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

import strawberry
from strawberry.scalars import JSON

from app.api.types.node import AttemptRef, Info, Node, attempt_of, loaders_of, mode_now
from app.domain.control.identity import attempt_uuid, format_attempt_ref

if TYPE_CHECKING:  # row types for annotations only: the SQL lives in the areas' queries
    from app.advice.models import Advice as AdviceRow
    from app.advice.models import SchedulerAction
else:  # strawberry resolves annotations at run time: a row is opaque to it
    AdviceRow = Any
    SchedulerAction = Any


@strawberry.type(
    description="One scheduler command (or its observe-mode shadow) taken to reconcile an Advice generation."
)
class Milestone:
    row: strawberry.Private[SchedulerAction]

    @strawberry.field
    def generation(self) -> int:
        return self.row.generation

    @strawberry.field(description="requeue_hold, update_exclusions, release or cancel.")
    def step(self) -> str:
        return self.row.step

    @strawberry.field(description="STARTED, SUCCEEDED, SKIPPED, FAILED or SHADOW.")
    def status(self) -> str:
        return self.row.status

    @strawberry.field
    def idempotency_key(self) -> str:
        return self.row.idempotency_key

    @strawberry.field
    def actor(self) -> str:
        return self.row.actor

    @strawberry.field
    def command(self) -> str | None:
        return self.row.command

    @strawberry.field
    def detail(self) -> str | None:
        return self.row.detail

    @strawberry.field
    def started_at(self) -> dt.datetime:
        return self.row.started_at

    @strawberry.field
    def finished_at(self) -> dt.datetime | None:
        return self.row.finished_at

    @strawberry.field
    def duration_ms(self) -> float | None:
        return self.row.duration_ms

    @strawberry.field(
        description="The one gate's answer when it was taken: `allowed (ALLOWED): …` or `not sent (REASON): …` "
        "(ceiling, job mode, mode at decision, the component's own switch, fleet rules); null on older rows."
    )
    def gate(self) -> str | None:
        return self.row.gate


@strawberry.type(description="The controller's report on an Advice: did Slurm get to the desired state?")
class Reconciliation:
    row: strawberry.Private[AdviceRow]

    @strawberry.field(description="PENDING, CONVERGED or ABANDONED.")
    def disposition(self) -> str:
        return self.row.disposition

    @strawberry.field(
        description="DESIRED_STATE_OBSERVED, ALREADY_SATISFIED, ADVICE_EXPIRED, JOB_NOT_FOUND, "
        "NOT_AUTHORIZED, DECIDED_IN_OBSERVE, VETOED, BUDGET_EXCEEDED, STORM_PAUSED, …"
    )
    def reason(self) -> str | None:
        return self.row.disposition_reason

    @strawberry.field
    def message(self) -> str | None:
        return self.row.disposition_message

    @strawberry.field(description="The Advice generation the controller last reported on.")
    def observed_generation(self) -> int | None:
        return self.row.observed_generation

    @strawberry.field
    def next_reconcile_at(self) -> dt.datetime | None:
        return self.row.next_reconcile_at

    @strawberry.field
    def reconcile_failures(self) -> int:
        return self.row.reconcile_failures

    @strawberry.field(description="Scheduler actions in the order they were taken.")
    async def milestones(self, info: Info) -> list[Milestone]:
        return [Milestone(row=row) for row in await loaders_of(info).milestones.load(self.row.id)]


@strawberry.type(description="The durable decision about one attempt: restart (with node exclusions) or terminate.")
class Advice(Node):
    row: strawberry.Private[AdviceRow]

    @strawberry.field(description="The Slurm job id.")
    def job_id(self) -> int:
        return self.row.slurm_job_id

    @strawberry.field
    def attempt_index(self) -> int:
        return self.row.attempt_index

    @strawberry.field(description="The UUID of the attempt this Advice is about.")
    def heimdall_job_id(self) -> str:
        return attempt_uuid(self.row.cluster, self.row.slurm_job_id, self.row.attempt_index)

    @strawberry.field
    def attempt_ref(self) -> str:
        return format_attempt_ref(self.row.slurm_job_id, self.row.attempt_index)

    @strawberry.field
    def cluster(self) -> str:
        return self.row.cluster

    @strawberry.field(description="RESTART or TERMINATE.")
    def operation(self) -> str:
        return self.row.operation

    @strawberry.field(description="Nodes the next attempt must avoid.")
    def exclusions(self) -> list[str]:
        return list(self.row.exclusions or [])

    @strawberry.field
    def reason(self) -> str:
        return self.row.reason

    @strawberry.field(description="The policy rule that decided (e.g. which retry limit stopped it).")
    def rule(self) -> str | None:
        return self.row.rule

    @strawberry.field
    def evidence(self) -> JSON:
        return JSON(self.row.evidence or {})

    @strawberry.field(
        description="The checkpoint check made before release (status OK, MISSING, INCOMPLETE, NOT_NEWER or "
        "UNCHECKED, message, path, framework, layout, iteration, loadable); null when checks are off or no save "
        "was recorded (docs/checkpoint-checks.md)."
    )
    def checkpoint_check(self) -> JSON | None:
        return JSON(self.row.checkpoint_check) if self.row.checkpoint_check else None

    @strawberry.field(
        description="auto_resume_mode singleton_dependency: the Slurm job id of the held twin this Advice releases."
    )
    def successor_job_id(self) -> int | None:
        return self.row.successor_job_id

    @strawberry.field(description="Grows whenever the decision changes.")
    def generation(self) -> int:
        return self.row.generation

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

    @strawberry.field(description="The mode it was decided under (a record of that time, not the mode now).")
    def mode_at_decision(self) -> str:
        return self.row.mode

    @strawberry.field(description="Why modeAtDecision applied when it was decided.")
    def mode_reason_at_decision(self) -> str | None:
        return self.row.mode_reason

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
    def expires_at(self) -> dt.datetime | None:
        return self.row.expires_at

    @strawberry.field(description="True while it may still need reconciliation.")
    def active(self) -> bool:
        return self.row.active

    @strawberry.field(description="Operator review: APPROVED, VETOED or null.")
    def review(self) -> str | None:
        return self.row.review

    @strawberry.field
    def reviewed_by(self) -> str | None:
        return self.row.reviewed_by

    @strawberry.field
    def reconciliation(self) -> Reconciliation:
        return Reconciliation(row=self.row)

    @strawberry.field
    def created_at(self) -> dt.datetime:
        return self.row.created_at

    @strawberry.field
    def updated_at(self) -> dt.datetime:
        return self.row.updated_at

    @strawberry.field
    async def attempt(self, info: Info) -> AttemptRef:
        return await attempt_of(info, self.row.attempt_id)
