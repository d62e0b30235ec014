"""GraphQL object types: each wraps one ORM row and resolves its relations through DataLoaders."""

from __future__ import annotations

import datetime as dt
from typing import Any, Optional

import strawberry
from strawberry.scalars import JSON

from app.advice.models import Advice as AdviceRow
from app.advice.models import SchedulerAction
from app.api.connections import AUDIT, NESTED, Connection, first_page, is_plain_first_page, page_request, to_connection, cursor_problem
from app.api.ids import to_global_id
from app.audit import service as audit_service
from app.audit.models import AuditEvent as AuditEventRow
from app.domain.cursor import CursorError
from app.domain.identity import attempt_uuid, format_attempt_ref
from app.evidence.models import Anomaly as AnomalyRow
from app.evidence.models import Checkpoint as CheckpointRow
from app.jobs import queries as job_queries
from app.jobs.models import Attempt as AttemptRow
from app.jobs.models import Job as JobRow
from app.jobs.models import Policy as PolicyRow
from app.jobs.models import Workflow as WorkflowRow

Info = strawberry.Info


def _loaders(info: Info) -> Any:
    return info.context.loaders


@strawberry.interface(description="An object with an opaque global id, fetchable with `node(id:)` (Relay).")
class Node:
    row: strawberry.Private[Any]

    @strawberry.field(description="Opaque global id.")
    def id(self) -> strawberry.ID:
        return strawberry.ID(to_global_id(type(self).__name__, self.row.id))


@strawberry.type(description="A group of jobs sharing a workflow_id on one cluster; grouping does not imply order.")
class Workflow(Node):
    row: strawberry.Private[WorkflowRow]

    @strawberry.field(description="The workflow_id of the jobs' policies (or job-<jobId> when they named none).")
    def key(self) -> str:
        return self.row.workflow_key

    @strawberry.field
    def cluster(self) -> str:
        return self.row.cluster

    @strawberry.field
    def environment(self) -> str:
        return self.row.environment

    @strawberry.field(description="State of the newest attempt.")
    def latest_state(self) -> str | None:
        return self.row.latest_state

    @strawberry.field
    def latest_job_name(self) -> str | None:
        return self.row.latest_job_name

    @strawberry.field
    def attempt_count(self) -> int:
        return self.row.attempt_count

    @strawberry.field
    def failed_attempt_count(self) -> int:
        return self.row.failed_attempt_count

    @strawberry.field
    def created_at(self) -> dt.datetime:
        return self.row.created_at

    @strawberry.field
    def updated_at(self) -> dt.datetime:
        return self.row.updated_at

    @strawberry.field(description="The workflow's jobs, newest first (one statement per workflow).")
    async def jobs(
        self, info: Info, first: int | None = None, after: str | None = None, last: int | None = None, before: str | None = None
    ) -> Connection["Job"]:
        request = page_request(first=first, after=after, last=last, before=before, sizes=NESTED)
        async with info.context.loaders.sessions() as session:
            try:
                page = await job_queries.list_jobs(session, filter=job_queries.JobFilter(workflow_id=self.row.id), page=request)
            except CursorError as exc:
                raise cursor_problem(exc) from None
        return to_connection(page, lambda row: Job(row=row))


@strawberry.type(description="The job's APS policy as parsed: effective values with every default filled in, warnings, errors.")
class Policy:
    row: strawberry.Private[PolicyRow]

    def _value(self, key: str, section: str | None = None) -> Any:
        effective = self.row.effective or {}
        if section:
            effective = effective.get(section) or {}
        return effective.get(key)

    @strawberry.field(description="`APS` or `HEIMDALL`; null when the comment had no wrapper.")
    def wrapper(self) -> str | None:
        return self.row.wrapper

    @strawberry.field
    def valid(self) -> bool:
        return self.row.valid

    @strawberry.field(description="The whole effective policy (defaults filled in; unknown keys kept).")
    def effective(self) -> Optional[JSON]:
        return self.row.effective

    @strawberry.field(description="Findings that do not stop enrolment (e.g. unknown keys), each {path, message}.")
    def warnings(self) -> JSON:
        return self.row.warnings or []

    @strawberry.field(description="Validation errors, each {path, message} with the JSON path of the bad value.")
    def errors(self) -> JSON:
        return self.row.errors or []

    @strawberry.field
    def workflow_id(self) -> str | None:
        return self._value("workflow_id")

    @strawberry.field
    def environment(self) -> str | None:
        return self._value("environment")

    @strawberry.field(description="Requested mode (observe | act); see Attempt.effectiveMode for what applies.")
    def mode(self) -> str | None:
        return self._value("mode")

    @strawberry.field
    def auto_resume_mode(self) -> str | None:
        return self._value("auto_resume_mode")

    @strawberry.field(description="The job's own retry request; null means the site ceiling applies.")
    def max_requeue_times(self) -> int | None:
        return self._value("max_requeue_times")

    @strawberry.field
    def log_file_paths_shared_across_attempts(self) -> bool | None:
        return self._value("log_file_paths_shared_across_attempts")

    @strawberry.field
    def log_based_timeout_enabled(self) -> bool | None:
        return self._value("log_based_timeout_enabled", "anomaly_detection_config")

    @strawberry.field(description="Hang threshold before the training loop, seconds.")
    def log_based_timeout_threshold_pretraining(self) -> int | None:
        return self._value("log_based_timeout_threshold_pretraining", "anomaly_detection_config")

    @strawberry.field(description="Hang threshold inside the training loop, seconds.")
    def log_based_timeout_threshold_trainingloop(self) -> int | None:
        return self._value("log_based_timeout_threshold_trainingloop", "anomaly_detection_config")

    @strawberry.field
    def straggler_detection_enabled(self) -> bool | None:
        return self._value("straggler_detection_enabled", "anomaly_detection_config")


@strawberry.type(description="One Slurm job (an incarnation of a job id: reuse of the id starts a new Job) and its enrolment.")
class Job(Node):
    row: strawberry.Private[JobRow]

    @strawberry.field(description="The Slurm job id.")
    def job_id(self) -> int:
        return self.row.slurm_job_id

    @strawberry.field
    def cluster(self) -> str:
        return self.row.cluster

    @strawberry.field(description="0 for the first submission seen with this job id; higher after job-id reuse.")
    def incarnation(self) -> int:
        return self.row.incarnation

    @strawberry.field
    def name(self) -> str | None:
        return self.row.name

    @strawberry.field
    def user(self) -> str | None:
        return self.row.user

    @strawberry.field
    def partition(self) -> str | None:
        return self.row.partition

    @strawberry.field
    def submit_time(self) -> dt.datetime | None:
        return self.row.submit_time

    @strawberry.field(description="The raw Slurm comment.")
    def comment(self) -> str | None:
        return self.row.comment

    @strawberry.field(description="ENROLLED, NOT_ENROLLED, ENVIRONMENT_MISMATCH or UNMANAGED_PARTITION.")
    def enrolment(self) -> str:
        return self.row.enrolment

    @strawberry.field
    def enrolment_reason(self) -> str | None:
        return self.row.enrolment_reason

    @strawberry.field
    def requested_mode(self) -> str | None:
        return self.row.requested_mode

    @strawberry.field(description="observe or act, after the operator's acknowledgment ceiling and partition allowlist.")
    def effective_mode(self) -> str:
        return self.row.effective_mode

    @strawberry.field(description="Why the effective mode is what it is.")
    def mode_reason(self) -> str | None:
        return self.row.mode_reason

    @strawberry.field
    def requeue_eligible(self) -> bool | None:
        return self.row.requeue_eligible

    @strawberry.field
    def state(self) -> str | None:
        return self.row.state

    @strawberry.field
    def restart_count(self) -> int:
        return self.row.restart_count

    @strawberry.field(description="When a new submission reused this job id (null while current).")
    def retired_at(self) -> dt.datetime | None:
        return self.row.retired_at

    @strawberry.field
    def last_seen_at(self) -> dt.datetime | None:
        return self.row.last_seen_at

    @strawberry.field
    async def workflow(self, info: Info) -> Workflow | None:
        if self.row.workflow_id is None:
            return None
        row = await _loaders(info).workflow.load(self.row.workflow_id)
        return Workflow(row=row) if row else None

    @strawberry.field
    async def policy(self, info: Info) -> Policy | None:
        row = await _loaders(info).policy.load(self.row.id)
        return Policy(row=row) if row else None

    @strawberry.field(description="The job's attempts, attempt 0 first; totalCount is given.")
    async def attempts(
        self, info: Info, first: int | None = None, after: str | None = None, last: int | None = None, before: str | None = None
    ) -> Connection["Attempt"]:
        request = page_request(first=first, after=after, last=last, before=before, sizes=NESTED)
        loaders = _loaders(info)
        total = await loaders.attempt_count.load(self.row.id)
        if is_plain_first_page(request):
            assert request.first is not None
            rows = await loaders.first_attempts.load((self.row.id, request.first + 1))
            page = first_page(rows, size=request.first, kind="job-attempts", key_of=lambda a: (a.attempt_index, a.id))
        else:
            async with loaders.sessions() as session:
                try:
                    page = await job_queries.list_attempts_of_job(session, job_id=self.row.id, page=request)
                except CursorError as exc:
                    raise cursor_problem(exc) from None
        return to_connection(page, lambda row: Attempt(row=row), total_count=total)


@strawberry.type(description="One execution of a job: attempt 0 first, Slurm's requeue increments the index.")
class Attempt(Node):
    row: strawberry.Private[AttemptRow]

    @strawberry.field(description="The Slurm job id.")
    def job_id(self) -> int:
        return self.row.slurm_job_id

    @strawberry.field(description="0 for the first execution; Slurm's restart count.")
    def attempt_index(self) -> int:
        return self.row.attempt_index

    @strawberry.field(description="The attempt's stable UUID, derived from cluster, job id and attempt index.")
    def heimdall_job_id(self) -> str:
        return self.row.uuid

    @strawberry.field(description='"<jobId>-<attemptIndex>", accepted wherever an attempt is looked up.')
    def attempt_ref(self) -> str:
        return format_attempt_ref(self.row.slurm_job_id, self.row.attempt_index)

    @strawberry.field
    def cluster(self) -> str:
        return self.row.cluster

    @strawberry.field
    def state(self) -> str:
        return self.row.state

    @strawberry.field
    def state_reason(self) -> str | None:
        return self.row.state_reason

    @strawberry.field
    def exit_code(self) -> int | None:
        return self.row.exit_code

    @strawberry.field
    def exit_signal(self) -> int | None:
        return self.row.exit_signal

    @strawberry.field
    def nodes(self) -> list[str]:
        return list(self.row.nodes or [])

    @strawberry.field(description="Nodes Slurm was told to avoid for this attempt.")
    def excluded_nodes(self) -> list[str]:
        return list(self.row.excluded_nodes or [])

    @strawberry.field
    def stdout_path(self) -> str | None:
        return self.row.stdout_path

    @strawberry.field
    def stderr_path(self) -> str | None:
        return self.row.stderr_path

    @strawberry.field(description="Whether Slurm would requeue the job (--requeue or the site's JobRequeue).")
    async def requeue_eligible(self, info: Info) -> bool | None:
        if self.row.requeue_eligible is not None:
            return self.row.requeue_eligible
        job = await _loaders(info).job.load(self.row.job_id)
        return job.requeue_eligible if job else None

    @strawberry.field
    def held(self) -> bool:
        return self.row.held

    @strawberry.field
    def start_time(self) -> dt.datetime | None:
        return self.row.start_time

    @strawberry.field
    def end_time(self) -> dt.datetime | None:
        return self.row.end_time

    @strawberry.field
    def ended_reason(self) -> str | None:
        return self.row.ended_reason

    @strawberry.field
    def created_at(self) -> dt.datetime:
        return self.row.created_at

    @strawberry.field
    def updated_at(self) -> dt.datetime:
        return self.row.updated_at

    @strawberry.field(description="observe or act, as resolved for the job (see modeReason).")
    async def effective_mode(self, info: Info) -> str | None:
        job = await _loaders(info).job.load(self.row.job_id)
        return job.effective_mode if job else None

    @strawberry.field(description="Why the job's act request did or did not take effect.")
    async def mode_reason(self, info: Info) -> str | None:
        job = await _loaders(info).job.load(self.row.job_id)
        return job.mode_reason if job else None

    @strawberry.field
    async def job(self, info: Info) -> Job:
        return Job(row=await _loaders(info).job.load(self.row.job_id))

    @strawberry.field
    async def workflow(self, info: Info) -> Workflow | None:
        if self.row.workflow_id is None:
            return None
        row = await _loaders(info).workflow.load(self.row.workflow_id)
        return Workflow(row=row) if row else None

    @strawberry.field(description="The attempt's Advice (one per attempt; a changed decision is a new generation).")
    async def advice(self, info: Info) -> Optional["Advice"]:
        row = await _loaders(info).advice_of_attempt.load(self.row.id)
        return Advice(row=row) if row else None

    @strawberry.field(description="Recognised checkpoint save/load lines, newest first (evidence, not proof of loadability).")
    async def checkpoints(
        self, info: Info, first: int | None = None, after: str | None = None, last: int | None = None, before: str | None = None
    ) -> Connection["Checkpoint"]:
        request = page_request(first=first, after=after, last=last, before=before, sizes=NESTED)
        loaders = _loaders(info)
        if is_plain_first_page(request):
            assert request.first is not None
            rows = await loaders.latest_checkpoints.load((self.row.id, request.first + 1))
            page = first_page(rows, size=request.first, kind="checkpoints", key_of=lambda c: (c.id,))
        else:
            async with loaders.sessions() as session:
                try:
                    page = await job_queries.list_checkpoints(session, attempt_id=self.row.id, page=request)
                except CursorError as exc:
                    raise cursor_problem(exc) from None
        return to_connection(page, lambda row: Checkpoint(row=row))

    @strawberry.field(description="Detected anomalies, newest first.")
    async def anomalies(
        self, info: Info, first: int | None = None, after: str | None = None, last: int | None = None, before: str | None = None
    ) -> Connection["Anomaly"]:
        request = page_request(first=first, after=after, last=last, before=before, sizes=NESTED)
        loaders = _loaders(info)
        if is_plain_first_page(request):
            assert request.first is not None
            rows = await loaders.latest_anomalies.load((self.row.id, request.first + 1))
            page = first_page(rows, size=request.first, kind="anomalies", key_of=lambda a: (a.id,))
        else:
            async with loaders.sessions() as session:
                try:
                    page = await job_queries.list_anomalies(session, attempt_id=self.row.id, page=request)
                except CursorError as exc:
                    raise cursor_problem(exc) from None
        return to_connection(page, lambda row: Anomaly(row=row))

    @strawberry.field(description="This attempt's audit events, oldest first (one statement per attempt).")
    async def audit_events(
        self, info: Info, first: int | None = None, after: str | None = None, last: int | None = None, before: str | None = None
    ) -> Connection["AuditEvent"]:
        request = page_request(first=first, after=after, last=last, before=before, sizes=AUDIT)
        flt = audit_service.AuditFilter(slurm_job_id=self.row.slurm_job_id, attempt_index=self.row.attempt_index, cluster=self.row.cluster)
        async with _loaders(info).sessions() as session:
            try:
                page = await audit_service.query(session, filter=flt, page=request, descending=False)
            except CursorError as exc:
                raise cursor_problem(exc) from None
        return to_connection(page, lambda row: AuditEvent(row=row))


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
    async def attempt(self, info: Info) -> Attempt:
        return Attempt(row=await _loaders(info).attempt.load(self.row.attempt_id))


@strawberry.type(description="Something wrong with an attempt: a crash line, no progress, a slowdown, a scheduler failure.")
class Anomaly(Node):
    row: strawberry.Private[AnomalyRow]

    @strawberry.field(description="CRASH, NO_PROGRESS, SLOWDOWN or SCHEDULER_FAILURE.")
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
        return self.row.details or {}

    @strawberry.field
    def detected_at(self) -> dt.datetime:
        return self.row.detected_at

    @strawberry.field
    async def attempt(self, info: Info) -> Attempt:
        return Attempt(row=await _loaders(info).attempt.load(self.row.attempt_id))


@strawberry.type(description="One scheduler command (or its observe-mode shadow) taken to reconcile an Advice generation.")
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


@strawberry.type(description="The controller's report on an Advice: did Slurm get to the desired state?")
class Reconciliation:
    row: strawberry.Private[AdviceRow]

    @strawberry.field(description="PENDING, CONVERGED or ABANDONED.")
    def disposition(self) -> str:
        return self.row.disposition

    @strawberry.field(description="DESIRED_STATE_OBSERVED, ALREADY_SATISFIED, ADVICE_EXPIRED, JOB_NOT_FOUND, NOT_AUTHORIZED, VETOED, …")
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
        return [Milestone(row=row) for row in await _loaders(info).milestones.load(self.row.id)]


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
        return self.row.evidence or {}

    @strawberry.field(description="Grows whenever the decision changes.")
    def generation(self) -> int:
        return self.row.generation

    @strawberry.field(description="The mode it was decided under (act or observe).")
    def mode(self) -> str:
        return self.row.mode

    @strawberry.field
    def mode_reason(self) -> str | None:
        return self.row.mode_reason

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
    async def attempt(self, info: Info) -> Attempt:
        return Attempt(row=await _loaders(info).attempt.load(self.row.attempt_id))


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
        return self.row.payload or {}

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
    async def workflow(self, info: Info) -> Workflow | None:
        if self.row.workflow_id is None:
            return None
        row = await _loaders(info).workflow.load(self.row.workflow_id)
        return Workflow(row=row) if row else None


NODE_TYPES: dict[str, type[Node]] = {
    cls.__name__: cls for cls in (Workflow, Job, Attempt, Checkpoint, Anomaly, Advice, AuditEvent)
}
