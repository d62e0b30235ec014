"""GraphQL types of workflows, jobs (with their policies) and attempts: each wraps one ORM row."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

import strawberry

from app.advice.stories import headline
from app.api.connections import AUDIT, NESTED, Connection, nested_connection, paged, read_connection
from app.api.derive import graphql_fields
from app.api.types.advice import Advice
from app.api.types.audit import AuditEvent, audit_event
from app.api.types.evidence import Anomaly, Checkpoint, StackCapture
from app.api.types.goodput import Goodput, goodput_of
from app.api.types.node import Info, Node, loaders_of, mode_now, register, workflow_of
from app.api.types.story import Story
from app.audit import queries as audit_queries
from app.evidence import queries as evidence_queries
from app.infra.pagination import PageRequest
from app.jobs import queries as job_queries
from app.jobs import read_model

if TYPE_CHECKING:  # row types for annotations only: the SQL lives in the areas' queries
    from app.jobs.models import Attempt as AttemptRow
    from app.jobs.models import Job as JobRow
    from app.jobs.models import Policy as PolicyRow
    from app.jobs.models import Workflow as WorkflowRow
else:  # strawberry resolves annotations at run time: a row is opaque to it
    AttemptRow = Any
    JobRow = Any
    PolicyRow = Any
    WorkflowRow = Any


@register
@graphql_fields(read_model.WORKFLOW)
@strawberry.type(description="A group of jobs sharing a workflow_id on one cluster; grouping does not imply order.")
class Workflow(Node):
    row: strawberry.Private[WorkflowRow]

    @strawberry.field(
        description="The story of the workflow's newest job (its newest attempt with Advice, else its newest)."
    )
    async def story(self, info: Info) -> Story | None:
        job = await loaders_of(info).latest_job.load(self.row.id)
        told = headline(await loaders_of(info).stories.load(job.id)) if job else None
        return Story(told=told) if told else None

    @strawberry.field(description="The workflow's jobs, newest first (one statement per workflow).")
    @paged(NESTED)
    async def jobs(self, info: Info, request: PageRequest) -> Connection[Job]:
        fetch = partial(job_queries.list_jobs, filter=job_queries.JobFilter(workflow_id=self.row.id))
        return await read_connection(loaders_of(info).sessions, request, fetch, lambda row: Job(row=row))

    @strawberry.field(
        description="Where the wall time of the workflow's runs went (docs/goodput.md); one batch for a page."
    )
    async def goodput(self, info: Info) -> Goodput:
        return goodput_of(await loaders_of(info).workflow_goodput.load(self.row.id))


@graphql_fields(read_model.POLICY)
@strawberry.type(
    description="The job's APS policy as parsed: effective values with every default filled in, warnings, errors."
)
class Policy:
    row: strawberry.Private[PolicyRow]


@graphql_fields(read_model.JOB)
@strawberry.type(
    description="One Slurm job (an incarnation of a job id: reuse of the id starts a new Job) and its enrolment."
)
class Job(Node):
    row: strawberry.Private[JobRow]

    @strawberry.field(
        description="Every recorded task of this job's array, this one included, by task index; empty for other jobs."
    )
    async def array_tasks(self, info: Info) -> list[Job]:
        if self.row.array_job_id is None:
            return []
        async with loaders_of(info).sessions() as session:
            rows = await job_queries.array_tasks(session, job=self.row)
        return [Job(row=row) for row in rows]

    @strawberry.field(
        description="observe or act NOW: the requested mode under the operator's current acknowledgment ceiling "
        "and partition allowlist (see modeReason; modeAtRegistration is what applied when the job was registered)."
    )
    def effective_mode(self, info: Info) -> str:
        return mode_now(info, self.row).mode

    @strawberry.field(description="Why effectiveMode applies now.")
    def mode_reason(self, info: Info) -> str:
        return mode_now(info, self.row).reason

    @strawberry.field(description="The job's story: its newest attempt with Advice, else its newest attempt.")
    async def story(self, info: Info) -> Story | None:
        told = headline(await loaders_of(info).stories.load(self.row.id))
        return Story(told=told) if told else None

    @strawberry.field
    async def workflow(self, info: Info) -> Workflow | None:
        return await workflow_of(info, self.row.workflow_id)

    @strawberry.field
    async def policy(self, info: Info) -> Policy | None:
        row = await loaders_of(info).policy.load(self.row.id)
        return Policy(row=row) if row else None

    @strawberry.field(description="The job's attempts, attempt 0 first; totalCount is given.")
    @paged(NESTED)
    async def attempts(self, info: Info, request: PageRequest) -> Connection[Attempt]:
        loaders = loaders_of(info)
        total = await loaders.attempt_count.load(self.row.id)
        return await nested_connection(
            loaders.sessions,
            request,
            parent_id=self.row.id,
            batch=loaders.first_attempts,
            kind="job-attempts",
            key_of=lambda a: (a.attempt_index, a.id),
            fetch=partial(job_queries.list_attempts_of_job, job_id=self.row.id),
            wrap=lambda row: Attempt(row=row),
            total_count=total,
        )


@register
@graphql_fields(read_model.ATTEMPT)
@strawberry.type(description="One execution of a job: attempt 0 first, Slurm's requeue increments the index.")
class Attempt(Node):
    row: strawberry.Private[AttemptRow]

    @strawberry.field(description="Whether Slurm would requeue the job (--requeue or the site's JobRequeue).")
    async def requeue_eligible(self, info: Info) -> bool | None:
        if self.row.requeue_eligible is not None:
            return self.row.requeue_eligible
        job = await loaders_of(info).job.load(self.row.job_id)
        return job.requeue_eligible if job else None

    @strawberry.field(description="observe or act NOW for the attempt's job (see modeReason).")
    async def effective_mode(self, info: Info) -> str | None:
        job = await loaders_of(info).job.load(self.row.job_id)
        return mode_now(info, job).mode if job else None

    @strawberry.field(description="Why the job's act request did or did not take effect.")
    async def mode_reason(self, info: Info) -> str | None:
        job = await loaders_of(info).job.load(self.row.job_id)
        return mode_now(info, job).reason if job else None

    @strawberry.field
    async def job(self, info: Info) -> Job:
        return Job(row=await loaders_of(info).job.load(self.row.job_id))

    @strawberry.field
    async def workflow(self, info: Info) -> Workflow | None:
        return await workflow_of(info, self.row.workflow_id)

    @strawberry.field(description="This attempt's story: what happened, what was decided, whether it happened.")
    async def story(self, info: Info) -> Story | None:
        told = await loaders_of(info).stories.load(self.row.job_id)
        mine = next((t for t in told if t.attempt.id == self.row.id), None)
        return Story(told=mine) if mine else None

    @strawberry.field(description="The attempt's Advice (one per attempt; a changed decision is a new generation).")
    async def advice(self, info: Info) -> Advice | None:
        row = await loaders_of(info).advice_of_attempt.load(self.row.id)
        return Advice(row=row) if row else None

    @strawberry.field(
        description="Every rank's stack, taken right before Recovery ended this attempt while it was RUNNING (a hang, "
        "a slowdown, a partial failure); null when none was taken."
    )
    async def stack_capture(self, info: Info) -> StackCapture | None:
        row = await loaders_of(info).stack_capture_of_attempt.load(self.row.id)
        return StackCapture(row=row) if row else None

    @strawberry.field(
        description="Recognised checkpoint save/load lines, newest first (evidence, not proof of loadability)."
    )
    @paged(NESTED)
    async def checkpoints(self, info: Info, request: PageRequest) -> Connection[Checkpoint]:
        loaders = loaders_of(info)
        return await _newest_first(loaders, request, self.row.id, loaders.latest_checkpoints, "checkpoints", Checkpoint)

    @strawberry.field(description="Detected anomalies, newest first.")
    @paged(NESTED)
    async def anomalies(self, info: Info, request: PageRequest) -> Connection[Anomaly]:
        loaders = loaders_of(info)
        return await _newest_first(loaders, request, self.row.id, loaders.latest_anomalies, "anomalies", Anomaly)

    @strawberry.field(description="This attempt's audit events, oldest first (one statement per attempt).")
    @paged(AUDIT)
    async def audit_events(self, info: Info, request: PageRequest) -> Connection[AuditEvent]:
        flt = audit_queries.AuditFilter(
            slurm_job_id=self.row.slurm_job_id, attempt_index=self.row.attempt_index, cluster=self.row.cluster
        )
        fetch = partial(audit_queries.query, filter=flt, descending=False)
        return await read_connection(loaders_of(info).sessions, request, fetch, audit_event)


async def _newest_first(loaders: Any, request: Any, attempt_id: int, batch: Any, kind: str, wrap: Any) -> Any:
    """An attempt's anomalies or checkpoints (`kind`), newest first: evidence_queries.list_<kind> pages them."""
    return await nested_connection(
        loaders.sessions,
        request,
        parent_id=attempt_id,
        batch=batch,
        kind=kind,
        key_of=lambda row: (row.id,),
        fetch=partial(getattr(evidence_queries, f"list_{kind}"), attempt_id=attempt_id),
        wrap=lambda row: wrap(row=row),
    )
