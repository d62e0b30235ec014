"""The Query root: lists as keyset connections, lookups by id, key, job id and attempt reference."""

from __future__ import annotations

import datetime as dt
from enum import Enum
from functools import partial

import strawberry

from app.advice import queries as advice_queries
from app.advice import today
from app.api import validation
from app.api.connections import AUDIT, TOP_LEVEL, Connection, paged, read_connection
from app.api.errors import bad_input
from app.api.ids import GlobalIdError, expect_global_id, from_global_id
from app.api.types import NODE_BUILDERS, Advice, Attempt, AuditEvent, Job, Node, Workflow, audit_event
from app.api.types.advice import OperatorDay
from app.api.types.cluster import Cluster, cluster_of
from app.api.types.fleet import ComputeNode, RecoveryHold, StormPause, compute_node_of, hold_of, pause_of
from app.api.types.goodput import Goodput, goodput_of
from app.audit import queries as audit_queries
from app.domain.control.identity import MAX_SLURM_JOB_ID, SchedulerJobId, parse_scheduler_job_id
from app.domain.edge import bounds
from app.domain.presentation.story import OUTCOMES
from app.fleet import queries as fleet_queries
from app.fleet import read_model as fleet_read_model
from app.goodput import queries as goodput_queries
from app.infra.db import utcnow
from app.infra.pagination import PageRequest
from app.jobs import queries as job_queries
from app.leases import queries as lease_queries

Info = strawberry.Info


@strawberry.enum(description="Sort direction of audit events by produced time.")
class SortOrder(Enum):
    ASC = "ASC"
    DESC = "DESC"


@strawberry.input(description="Workflow list filters; all optional, combined with AND.")
class WorkflowFilter:
    cluster: str | None = None
    environment: str | None = None
    state: str | None = strawberry.field(default=None, description="State of the newest attempt, e.g. FAILED.")
    search: str | None = strawberry.field(
        default=None, description="Substring of the workflow key or latest job name, or a job id (12345, 12345_7)."
    )
    failed_only: bool = strawberry.field(
        default=False,
        description="Only workflows that had a failure (a failed attempt, any Advice or a crash or hang).",
    )
    outcome: str | None = strawberry.field(
        default=None, description="recovered, stopped, observe only, running or completed (see Workflow.story)."
    )


@strawberry.input(description="Attempt list filters; all optional, combined with AND.")
class AttemptFilter:
    cluster: str | None = None
    workflow_id: strawberry.ID | None = None
    job_id: int | None = strawberry.field(default=None, description="Slurm job id.")
    state: str | None = None
    failed_only: bool = False


@strawberry.input(description="SPEC §7 audit filters; attemptIndex needs jobId (0 is a valid index).")
class AuditEventFilter:
    job_id: int | None = None
    attempt_index: int | None = None
    component: str | None = None
    event_type: str | None = strawberry.field(default=None, description="Exact event type.")
    level: str | None = strawberry.field(default=None, description="DEBUG, INFO, WARNING or ERROR.")
    produced_after: dt.datetime | None = strawberry.field(
        default=None, description="Inclusive lower bound of produced time."
    )
    produced_before: dt.datetime | None = strawberry.field(
        default=None, description="Exclusive upper bound of produced time."
    )
    cluster: str | None = None


def audit_filter(flt: AuditEventFilter | None) -> audit_queries.AuditFilter:
    """The service filter of the GraphQL input (bad combinations are the client's error)."""
    flt = flt or AuditEventFilter()
    try:
        return audit_queries.AuditFilter(
            slurm_job_id=flt.job_id,
            attempt_index=flt.attempt_index,
            component=validation.text(flt.component, "component") or None,
            event_type=validation.text(flt.event_type, "eventType") or None,
            level=validation.text(flt.level, "level") or None,
            produced_after=validation.time(flt.produced_after, "producedAfter"),
            produced_before=validation.time(flt.produced_before, "producedBefore"),
            cluster=validation.text(flt.cluster, "cluster") or None,
        )
    except audit_queries.AuditFilterError as exc:
        raise bad_input(str(exc)) from None


def _workflow_pk(value: strawberry.ID | None) -> int | None:
    if value is None:
        return None
    try:
        return expect_global_id(str(value), "Workflow")
    except GlobalIdError as exc:
        raise bad_input(str(exc)) from None


@strawberry.type
class Query:
    @strawberry.field(description="Any object by its global id (Relay).")
    async def node(self, info: Info, id: strawberry.ID) -> Node | None:
        info.context.viewer()
        try:
            type_name, pk = from_global_id(str(id))
        except GlobalIdError as exc:
            raise bad_input(str(exc)) from None
        loader = info.context.loaders.by_type(type_name)
        if loader is None:
            raise bad_input(f"unknown object type {type_name!r} in id")
        row = await loader.load(pk)
        return NODE_BUILDERS[type_name](row) if row is not None else None

    @strawberry.field(description="Workflows, most recently updated first.")
    @paged(TOP_LEVEL, root=True)
    async def workflows(
        self,
        info: Info,
        request: PageRequest,
        filter: WorkflowFilter | None = None,
    ) -> Connection[Workflow]:
        flt = filter or WorkflowFilter()
        service_filter = job_queries.WorkflowFilter(
            cluster=validation.text(flt.cluster, "cluster"),
            environment=validation.text(flt.environment, "environment"),
            state=validation.text(flt.state, "state"),
            search=validation.search(flt.search),
            failed_only=flt.failed_only,
        )
        if flt.outcome is not None and flt.outcome not in OUTCOMES:
            raise bad_input(f"outcome must be one of {', '.join(OUTCOMES)}, got {flt.outcome[:20]!r}")
        fetch = partial(
            advice_queries.list_overview,
            workflows=service_filter,
            overview=advice_queries.OverviewFilter(outcome=flt.outcome),
        )
        return await read_connection(info.context.loaders.sessions, request, fetch, lambda row: Workflow(row=row))

    @strawberry.field(
        description="One workflow by global id, or by key (and cluster when keys repeat across clusters)."
    )
    async def workflow(
        self, info: Info, id: strawberry.ID | None = None, key: str | None = None, cluster: str | None = None
    ) -> Workflow | None:
        info.context.viewer()
        if (id is None) == (key is None):
            raise bad_input("pass exactly one of id or key")
        if id is not None:
            row = await info.context.loaders.workflow.load(_workflow_pk(id))
        else:
            async with info.context.loaders.sessions() as session:
                row = await job_queries.find_workflow(
                    session,
                    key=validation.text(str(key), "key", maximum=bounds.MAX_KEY_LENGTH) or "",
                    cluster=validation.text(cluster, "cluster"),
                )
        return Workflow(row=row) if row else None

    @strawberry.field(
        description="The current record of a Slurm job (a live incarnation before retired ones): by jobId, or by "
        'schedulerJobId as Slurm users write it ("1234", or "1234_7" for task 7 of array 1234).'
    )
    async def job(
        self,
        info: Info,
        job_id: int | None = None,
        cluster: str | None = None,
        scheduler_job_id: str | None = None,
    ) -> Job | None:
        info.context.viewer()
        if (job_id is None) == (scheduler_job_id is None):
            raise bad_input("pass exactly one of jobId or schedulerJobId")
        if job_id is not None:
            if not 1 <= job_id <= MAX_SLURM_JOB_ID:
                return None  # as before: no job has such an id
            ref: SchedulerJobId | None = SchedulerJobId(job_id)
        else:
            ref = parse_scheduler_job_id(str(scheduler_job_id))
        if ref is None:
            raise bad_input(
                f"schedulerJobId must be a Slurm job id (1..{MAX_SLURM_JOB_ID}) or <array id>_<task id>, "
                f"got {str(scheduler_job_id)[:40]!r}"
            )
        async with info.context.loaders.sessions() as session:
            row = await job_queries.find_job_by_scheduler_id(
                session, ref=ref, cluster=validation.text(cluster, "cluster")
            )
        return Job(row=row) if row else None

    @strawberry.field(
        description='One attempt by (jobId, attemptIndex) or by ref: "12345-0" or its UUID (heimdallJobId).'
    )
    async def attempt(
        self,
        info: Info,
        job_id: int | None = None,
        attempt_index: int | None = None,
        ref: str | None = None,
        cluster: str | None = None,
    ) -> Attempt | None:
        info.context.viewer()
        cluster = validation.text(cluster, "cluster")
        async with info.context.loaders.sessions() as session:
            if ref is not None:
                if job_id is not None or attempt_index is not None:
                    raise bad_input("pass either ref or jobId and attemptIndex, not both")
                try:
                    checked = validation.text(ref, "ref") or ""
                    row = await job_queries.find_attempt_by_ref(session, ref=checked, cluster=cluster)
                except ValueError as exc:
                    raise bad_input(str(exc)) from None
            elif job_id is not None and attempt_index is not None:
                row = await job_queries.find_attempt(
                    session, slurm_job_id=job_id, attempt_index=attempt_index, cluster=cluster
                )
            else:
                raise bad_input("pass ref, or both jobId and attemptIndex")
        return Attempt(row=row) if row else None

    @strawberry.field(description="Attempts across jobs, most recently updated first.")
    @paged(TOP_LEVEL, root=True)
    async def attempts(
        self,
        info: Info,
        request: PageRequest,
        filter: AttemptFilter | None = None,
    ) -> Connection[Attempt]:
        flt = filter or AttemptFilter()
        service_filter = job_queries.AttemptFilter(
            cluster=validation.text(flt.cluster, "cluster"),
            workflow_id=_workflow_pk(flt.workflow_id),
            slurm_job_id=flt.job_id,
            state=validation.text(flt.state, "state"),
            failed_only=flt.failed_only,
        )
        fetch = partial(job_queries.list_attempts, filter=service_filter)
        return await read_connection(info.context.loaders.sessions, request, fetch, lambda row: Attempt(row=row))

    @strawberry.field(description="Advice, newest first; onlyActive keeps what may still need reconciliation.")
    @paged(TOP_LEVEL, root=True)
    async def advice(
        self,
        info: Info,
        request: PageRequest,
        only_active: bool = False,
        job_id: int | None = None,
        cluster: str | None = None,
    ) -> Connection[Advice]:
        flt = advice_queries.AdviceFilter(
            only_active=only_active, slurm_job_id=job_id, cluster=validation.text(cluster, "cluster")
        )
        fetch = partial(advice_queries.list_advice, filter=flt)
        return await read_connection(info.context.loaders.sessions, request, fetch, lambda row: Advice(row=row))

    @strawberry.field(
        description="Audit events with SPEC §7 filters, by produced time (DESC: newest first). No totalCount."
    )
    @paged(AUDIT, root=True)
    async def audit_events(
        self,
        info: Info,
        request: PageRequest,
        filter: AuditEventFilter | None = None,
        order: SortOrder = SortOrder.DESC,
    ) -> Connection[AuditEvent]:
        service_filter = audit_filter(filter)
        fetch = partial(audit_queries.query, filter=service_filter, descending=order is SortOrder.DESC)
        return await read_connection(info.context.app.read_sessions, request, fetch, audit_event)

    @strawberry.field(
        description="Every cluster of this installation (recorded jobs, or a worker that held its lease), by name."
    )
    async def clusters(self, info: Info, name: str | None = None) -> list[Cluster]:
        info.context.viewer()
        async with info.context.loaders.sessions() as session:
            rows = await lease_queries.cluster_overview(session, cluster=validation.text(name, "name"))
        return [cluster_of(row) for row in rows]

    @strawberry.field(
        description="Compute nodes that hardware/infrastructure evidence blamed (or an operator pinned), with their "
        "evidence, jobs and state (SUSPECT and PINNED nodes are excluded by later Advice for any job)."
    )
    async def nodes(self, info: Info, cluster: str | None = None, state: str | None = None) -> list[ComputeNode]:
        info.context.viewer()
        cluster = validation.text(cluster, "cluster") or None
        state = (validation.text(state, "state") or "").upper() or None
        async with info.context.loaders.sessions() as session:
            rows = await fleet_queries.node_overview(session, cluster=cluster)
        return [
            compute_node_of(row, blames)
            for row, blames in rows
            if state is None or fleet_read_model.node_state(row) == state
        ]

    @strawberry.field(
        description="Advice held past a recovery budget (open ones unless onlyOpen is false), newest first."
    )
    async def recovery_holds(
        self, info: Info, cluster: str | None = None, only_open: bool = True
    ) -> list[RecoveryHold]:
        info.context.viewer()
        cluster = validation.text(cluster, "cluster") or None
        async with info.context.loaders.sessions() as session:
            rows = await fleet_queries.holds(session, cluster=cluster, only_open=only_open)
        return [hold_of(row) for row in rows]

    @strawberry.field(description="Restart-storm pauses (unconfirmed ones unless onlyOpen is false), newest first.")
    async def storm_pauses(self, info: Info, cluster: str | None = None, only_open: bool = True) -> list[StormPause]:
        info.context.viewer()
        cluster = validation.text(cluster, "cluster") or None
        async with info.context.loaders.sessions() as session:
            rows = await fleet_queries.pauses(session, cluster=cluster, only_open=only_open)
        return [pause_of(row) for row in rows]

    @strawberry.field(
        description="Goodput of enrolled jobs seen in the last sinceHours (1..8760) on one cluster, or on all "
        "(docs/goodput.md)."
    )
    async def goodput(self, info: Info, cluster: str | None = None, since_hours: int = 168) -> Goodput:
        info.context.viewer()
        if not 1 <= since_hours <= 8760:
            raise bad_input("sinceHours must be between 1 and 8760")
        since = utcnow() - dt.timedelta(hours=since_hours)
        async with info.context.loaders.sessions() as session:
            report = await goodput_queries.cluster_goodput(
                session, cluster=validation.text(cluster, "cluster"), since=since
            )
        return goodput_of(report)

    @strawberry.field(
        description="The operator's day: counters of the last `hours` (1..8760) and what needs someone now, on one "
        "cluster or all; the same read as the dashboard's home page (/dashboard?hours=&cluster=)."
    )
    async def operator_day(self, info: Info, hours: int = 24, cluster: str | None = None) -> OperatorDay:
        info.context.viewer()
        if not 1 <= hours <= today.MAX_HOURS:
            raise bad_input(f"hours must be between 1 and {today.MAX_HOURS}")
        now = utcnow()
        async with info.context.loaders.sessions() as session:
            day = await today.operator_day(
                session,
                since=now - dt.timedelta(hours=hours),
                now=now,
                cluster=validation.text(cluster, "cluster") or None,
            )
        return OperatorDay(row=day)

    @strawberry.field(description="Who the API thinks you are.")
    def viewer(self, info: Info) -> Viewer:
        principal = info.context.viewer()
        return Viewer(subject=principal.subject, name=principal.name, roles=sorted(principal.roles))


@strawberry.type(description="The authenticated caller.")
class Viewer:
    subject: str
    name: str
    roles: list[str]
