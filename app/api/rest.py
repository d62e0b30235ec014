"""REST compatibility endpoints (/v1): jobs by scheduler id, Advice, workflows, audit events; JSON, paged by
nextPageToken."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from app import __version__
from app.advice import queries as advice_queries
from app.advice import read_model as advice_models
from app.advice import stories, today
from app.api.derive import rest_json
from app.api.jsonbody import FastJSONResponse as JSONResponse
from app.api.openapi import ADVICE_LIMITS, AUDIT_LIMITS, JOBS_LIMITS, openapi_document
from app.audit import queries as audit_queries
from app.audit import read_model as audit_models
from app.auth import Authenticator, AuthError, authenticate_request
from app.domain.admission.mode import ENROLLED, ModeSettings, effective_mode
from app.domain.control.identity import (
    MAX_SLURM_JOB_ID,
    format_scheduler_job_id,
    parse_scheduler_job_id,
)
from app.domain.edge import bounds
from app.domain.edge.cursor import MAX_CURSOR_LENGTH, CursorError
from app.domain.presentation.story import OUTCOMES
from app.evidence import queries as evidence_queries
from app.evidence import read_model as evidence_models
from app.fleet import queries as fleet_queries
from app.fleet import read_model as fleet_models
from app.infra.clusters import every_cluster
from app.infra.config import SettingsError
from app.infra.context import AppContext
from app.infra.db import utcnow
from app.infra.pagination import PageRequest
from app.jobs import queries as job_queries
from app.jobs import read_model as job_models
from app.leases import queries as lease_queries
from app.leases import read_model as lease_models

if TYPE_CHECKING:  # row types for annotations only: the SQL lives in the areas' queries
    from app.advice.models import Advice, SchedulerAction
    from app.audit.models import AuditEvent
    from app.jobs.models import Attempt, Job, Workflow
else:  # strawberry resolves annotations at run time: a row is opaque to it
    Advice = Any
    SchedulerAction = Any
    AuditEvent = Any
    Attempt = Any
    Job = Any
    Workflow = Any

_MICROS = re.compile(r"-?[0-9]{1,18}")


class BadRequest(Exception):
    """A query parameter or page token that cannot be used (answered 400)."""


def error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """The error shape of every /v1 endpoint: {"error": {"code", "message"}}."""
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


def _auth_error(exc: AuthError) -> JSONResponse:
    code = {401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED"}.get(exc.status, "UNAVAILABLE")
    headers = {"WWW-Authenticate": exc.www_authenticate} if exc.status in (401, 403) else None
    return error(exc.status, code, exc.message, headers)


def _limit(request: Request, limits: tuple[int, int]) -> int:
    value = _int(request, "limit", minimum=1, maximum=limits[1])
    return limits[0] if value is None else value


def _page(request: Request, limits: tuple[int, int]) -> PageRequest:
    token = request.query_params.get("page") or request.query_params.get("pageToken") or None
    if token is not None and len(token) > MAX_CURSOR_LENGTH:
        raise CursorError("page token too long")
    return PageRequest(first=_limit(request, limits), after=token)


def _bool(request: Request, name: str) -> bool:
    raw = request.query_params.get(name)
    if raw is None:
        return False
    value = raw.strip().lower()
    if value in {"true", "1", "yes"}:
        return True
    if value in {"false", "0", "no"}:
        return False
    raise BadRequest(f"{name} must be true or false, got {raw[:20]!r}")


def _int(request: Request, name: str, *, minimum: int = 0, maximum: int = 2**31 - 1) -> int | None:
    raw = request.query_params.get(name)
    if raw is None:
        return None
    try:
        return bounds.parse_int(raw, name, minimum=minimum, maximum=maximum)
    except bounds.BoundsError as exc:
        raise BadRequest(str(exc)) from None


def _time(request: Request, name: str) -> dt.datetime | None:
    """Unix microseconds or an ISO 8601 time with a zone."""
    raw = (request.query_params.get(name) or "").strip()
    if not raw:
        return None
    if _MICROS.fullmatch(raw):
        try:
            value = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=int(raw))
        except OverflowError:
            raise BadRequest(f"{name} is out of range") from None
    else:
        try:
            value = dt.datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise BadRequest(f"{name} must be Unix microseconds or an ISO 8601 time, got {raw[:40]!r}") from None
        if value.tzinfo is None:
            raise BadRequest(f"{name} needs a time zone (e.g. 2025-01-01T00:00:00Z) or Unix microseconds")
    try:
        return bounds.check_time(value, name)
    except bounds.BoundsError as exc:
        raise BadRequest(str(exc)) from None


def _text(request: Request, name: str, *, maximum: int = bounds.MAX_FILTER_LENGTH) -> str | None:
    value = request.query_params.get(name)
    try:
        return bounds.check_text(value, name, maximum=maximum) if value else None
    except bounds.BoundsError as exc:
        raise BadRequest(str(exc)) from None


_ATTEMPT = rest_json(job_models.ATTEMPT)
_WORKFLOW = rest_json(job_models.WORKFLOW)
_ADVICE = rest_json(advice_models.ADVICE)
_RECONCILIATION = rest_json(advice_models.RECONCILIATION)
milestone_json = rest_json(advice_models.SCHEDULER_ACTION)
stack_capture_json = rest_json(evidence_models.STACK_CAPTURE)
audit_json = rest_json(audit_models.AUDIT_EVENT)
workflow_json = _WORKFLOW


def attempt_json(
    attempt: Attempt, job: Job | None, workflow: Workflow | None, settings: ModeSettings
) -> dict[str, Any]:
    """An attempt as the REST API shows it (the user guide's field names), with what its job and workflow add."""
    mode = effective_mode(job, settings) if job else None
    return {
        **_ATTEMPT(attempt),
        "workflowId": workflow.workflow_key if workflow else None,
        "jobName": job.name if job else None,
        "arrayJobId": job.array_job_id if job else None,
        "arrayTaskId": job.array_task_id if job else None,
        "schedulerJobId": format_scheduler_job_id(
            attempt.slurm_job_id, job.array_job_id if job else None, job.array_task_id if job else None
        ),
        "requeueEligible": attempt.requeue_eligible
        if attempt.requeue_eligible is not None
        else (job.requeue_eligible if job else None),
        "effectiveMode": mode.mode if mode else None,
        "modeReason": mode.reason if mode else None,
        "modeAtRegistration": job.registered_mode if job else None,
    }


def advice_json(
    advice: Advice, milestones: Sequence[SchedulerAction], job: Job | None, settings: ModeSettings
) -> dict[str, Any]:
    """An Advice as the REST API shows it: identity, desired state, and the controller's reconciliation status."""
    mode = effective_mode(job, settings) if job else None
    return {
        **_ADVICE(advice),
        # The mode now (what the controller applies); modeAtDecision is what it was decided under.
        "mode": mode.mode if mode else advice.mode,
        "modeReason": mode.reason if mode else advice.mode_reason,
        "reconciliationStatus": {
            **_RECONCILIATION(advice),
            "milestones": [milestone_json(m) for m in milestones],
        },
    }


Handler = Callable[[Request, AppContext], Awaitable[Response]]


def rest_routes(ctx: AppContext, authenticator: Authenticator) -> list[BaseRoute]:
    """The /v1 routes (mounted by app.api.routes)."""

    def endpoint(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def serve(request: Request) -> Response:
            try:
                await authenticate_request(request, authenticator)
            except AuthError as exc:
                return _auth_error(exc)
            try:
                return await handler(request, ctx)
            except BadRequest as exc:
                return error(400, "INVALID_ARGUMENT", str(exc))
            except CursorError:
                return error(
                    400, "INVALID_ARGUMENT", "invalid page token: pass back the nextPageToken of the same listing"
                )
            except audit_queries.AuditFilterError as exc:
                return error(400, "INVALID_ARGUMENT", str(exc))

        serve.__name__ = handler.__name__
        serve.__doc__ = handler.__doc__
        return serve

    document = openapi_document()

    async def openapi(request: Request) -> Response:
        """The OpenAPI 3.1 document of /v1 (public: it describes the API and holds no data)."""
        return JSONResponse(document, headers={"Cache-Control": "no-cache"})

    return [
        Route("/openapi.json", openapi, methods=["GET"]),
        Route("/jobs/by-scheduler-id/{job_id}", endpoint(jobs_by_scheduler_id), methods=["GET"]),
        Route("/advice", endpoint(list_advice), methods=["GET"]),
        Route("/workflows", endpoint(list_workflows), methods=["GET"]),
        Route("/audit/events", endpoint(list_audit_events), methods=["GET"]),
        Route("/clusters", endpoint(list_clusters), methods=["GET"]),
        Route("/nodes", endpoint(list_nodes), methods=["GET"]),
        Route("/operator-day", endpoint(operator_day), methods=["GET"]),
        Route("/installation", endpoint(installation), methods=["GET"]),
    ]


def _next_token(page: Any) -> str | None:
    return page.end_cursor if page.has_next_page else None


async def jobs_by_scheduler_id(request: Request, ctx: AppContext) -> Response:
    """The attempts recorded under a Slurm job id or array task (`1234_7`): {"attempts": [...], "nextPageToken"}."""
    raw = request.path_params["job_id"]
    ref = parse_scheduler_job_id(raw)
    if ref is None:
        raise BadRequest(
            f"job id must be a Slurm job id (1..{MAX_SLURM_JOB_ID}) or <array id>_<task id>, got {raw[:20]!r}"
        )
    page_request = _page(request, JOBS_LIMITS)
    cluster = _text(request, "cluster")
    async with ctx.sessions() as session:
        slurm_job_id = ref.job_id
        if ref.task is not None:
            task = await job_queries.find_job_by_scheduler_id(session, ref=ref, cluster=cluster)
            if task is None:
                return error(404, "NOT_FOUND", f"no array task {ref} is recorded")
            slurm_job_id, cluster = task.slurm_job_id, task.cluster
        page = await job_queries.list_attempts_by_slurm_id(
            session, slurm_job_id=slurm_job_id, cluster=cluster, page=page_request
        )
        if not page.items and not page_request.after:
            # A refused job has no attempt: answer its enrolment (why it was refused), not a 404.
            refused = await job_queries.find_job(session, slurm_job_id=slurm_job_id, cluster=cluster)
            if refused is None:
                return error(404, "NOT_FOUND", f"no attempts recorded for job {ref}")
            return JSONResponse({"attempts": [], "nextPageToken": None, "enrolment": enrolment_json(refused)})
        jobs = await job_queries.jobs_by_ids(session, ids=[a.job_id for a in page.items])
        workflows = await job_queries.workflows_by_ids(
            session, ids=[a.workflow_id for a in page.items if a.workflow_id]
        )
        told = await stories.stories_of_jobs(session, job_ids=sorted({a.job_id for a in page.items}))
        captures = await evidence_queries.stack_captures_of_attempts(session, attempt_ids=[a.id for a in page.items])
    by_attempt = {t.attempt.id: t for rows in told.values() for t in rows}
    attempts = [
        {
            **attempt_json(
                a, jobs.get(a.job_id), workflows.get(a.workflow_id) if a.workflow_id else None, ctx.settings
            ),
            "story": story_json(by_attempt.get(a.id)),
            "stackCapture": stack_capture_json(captures[a.id]) if a.id in captures else None,
        }
        for a in page.items
    ]
    newest = max(jobs.values(), key=lambda j: j.id, default=None)
    return JSONResponse(
        {
            "attempts": attempts,
            "nextPageToken": _next_token(page),
            "enrolment": enrolment_json(newest) if newest else None,
        }
    )


def enrolment_json(job: Job) -> dict[str, Any]:
    """Whether a job is enrolled and, when it was refused, why (the words the dashboard shows)."""
    return {
        "jobId": job.slurm_job_id,
        "cluster": job.cluster,
        "enrolled": job.enrolment == ENROLLED,
        "enrolment": job.enrolment,
        "reason": job.enrolment_reason,
    }


def story_json(told: Any) -> dict[str, Any] | None:
    """An attempt's story (app.domain.presentation.story) as the REST API shows it."""
    if told is None:
        return None
    story = told.story
    return {
        "sentence": story.sentence,
        "outcome": story.outcome.value,
        "happened": story.happened,
        "decided": story.decided,
        "result": story.result,
        "nextAttemptIndex": told.next_attempt.attempt_index if told.next_attempt is not None else None,
        "cites": cited_json(told.anomaly),
    }


_CITED = rest_json(evidence_models.ANOMALY)


def cited_json(anomaly: Any) -> dict[str, Any] | None:
    """The anomaly a story cites (the one its Advice was decided on), as the REST API shows it."""
    return _CITED(anomaly) if anomaly is not None else None


def _clusters(settings: Any) -> list[Any]:
    try:
        return every_cluster(settings)
    except SettingsError:  # a broken clusters file is the worker's to report; here the installation's own values
        return [settings]


async def installation(request: Request, ctx: AppContext) -> Response:
    """What `recovery check-script --server` judges against: version, environment and managed partitions."""
    settings = ctx.settings
    return JSONResponse(
        {
            "version": __version__,
            "cluster": settings.cluster,
            "environment": settings.environment,
            "managedPartitions": list(settings.managed_partitions),
            "clusters": [
                {"name": c.cluster, "environment": c.environment, "managedPartitions": list(c.managed_partitions)}
                for c in _clusters(settings)
            ],
        }
    )


async def list_advice(request: Request, ctx: AppContext) -> Response:
    """Advice, newest first: {"advice": [...], "nextPageToken"}; onlyActive=true keeps what may still need work."""
    flt = advice_queries.AdviceFilter(only_active=_bool(request, "onlyActive"), cluster=_text(request, "cluster"))
    page_request = _page(request, ADVICE_LIMITS)
    async with ctx.sessions() as session:
        page = await advice_queries.list_advice(session, filter=flt, page=page_request)
        milestones = await advice_queries.milestones_of_advice(session, advice_ids=[a.id for a in page.items])
        jobs = await job_queries.jobs_by_ids(session, ids=[a.job_id for a in page.items])
    advice = [advice_json(a, milestones.get(a.id, []), jobs.get(a.job_id), ctx.settings) for a in page.items]
    return JSONResponse({"advice": advice, "nextPageToken": _next_token(page)})


async def list_workflows(request: Request, ctx: AppContext) -> Response:
    """Workflows, most recently updated first: {"workflows": [...], "nextPageToken"}."""
    outcome = _text(request, "outcome")
    if outcome is not None and outcome not in OUTCOMES:
        raise BadRequest(f"outcome must be one of {', '.join(OUTCOMES)}, got {outcome[:20]!r}")
    flt = job_queries.WorkflowFilter(
        cluster=_text(request, "cluster"),
        environment=_text(request, "environment"),
        state=_text(request, "state"),
        search=_text(request, "search", maximum=bounds.MAX_SEARCH_LENGTH),
        failed_only=_bool(request, "failedOnly"),
    )
    async with ctx.sessions() as session:
        page = await advice_queries.list_overview(
            session,
            workflows=flt,
            overview=advice_queries.OverviewFilter(outcome=outcome),
            page=_page(request, JOBS_LIMITS),
        )
        outcomes = await advice_queries.outcomes_of_workflows(session, workflow_ids=[w.id for w in page.items])
    return JSONResponse(
        {
            "workflows": [{**workflow_json(w), "outcome": outcomes.get(w.id, "running")} for w in page.items],
            "nextPageToken": _next_token(page),
        }
    )


async def list_audit_events(request: Request, ctx: AppContext) -> Response:
    """Audit events with the SPEC §7 filters: {"events": [...], "nextPageToken"}; order=asc|desc by produced time."""
    order = (request.query_params.get("order") or "desc").strip().lower()
    if order not in {"asc", "desc"}:
        raise BadRequest(f"order must be asc or desc, got {order[:10]!r}")
    flt = audit_queries.AuditFilter(
        slurm_job_id=_int(request, "jobId", minimum=1, maximum=MAX_SLURM_JOB_ID),
        attempt_index=_int(request, "attemptIndex"),
        component=_text(request, "component"),
        event_type=_text(request, "eventType"),
        level=_text(request, "level"),
        produced_after=_time(request, "producedAfter"),
        produced_before=_time(request, "producedBefore"),
        cluster=_text(request, "cluster"),
    )
    async with ctx.read_sessions() as session:
        page = await audit_queries.query(
            session, filter=flt, page=_page(request, AUDIT_LIMITS), descending=order == "desc"
        )
    return JSONResponse({"events": [audit_json(e) for e in page.items], "nextPageToken": _next_token(page)})


_LEASE = rest_json(lease_models.LEASE)
_CLUSTER = rest_json(lease_models.CLUSTER)
_NODE = rest_json(fleet_models.COMPUTE_NODE)
_NODE_EVIDENCE = rest_json(fleet_models.NODE_EVIDENCE)


_DAY = rest_json(advice_models.OPERATOR_DAY)
_NEED = rest_json(advice_models.NEED)


async def operator_day(request: Request, ctx: AppContext) -> Response:
    """The operator's day (?hours=24&cluster=): the dashboard home page's counters and "Needs you" list."""
    hours = _int(request, "hours", minimum=1, maximum=today.MAX_HOURS) or 24
    now = utcnow()
    async with ctx.sessions() as session:
        day = await today.operator_day(
            session, since=now - dt.timedelta(hours=hours), now=now, cluster=_text(request, "cluster")
        )
    return JSONResponse({**_DAY(day), "needsYou": [_NEED(need) for need in day.needs]})


def _lease_json(row: Any) -> dict[str, Any] | None:
    return _LEASE(row) if row is not None else None


async def list_clusters(request: Request, ctx: AppContext) -> Response:
    """Every cluster of the installation: {"clusters": [{name, jobCount, ..., worker, watchdog}]}; ?cluster= one."""
    async with ctx.sessions() as session:
        rows = await lease_queries.cluster_overview(session, cluster=_text(request, "cluster"))
    clusters = [
        {**_CLUSTER(row), "worker": _lease_json(row.worker), "watchdog": _lease_json(row.watchdog)} for row in rows
    ]
    return JSONResponse({"clusters": clusters})


async def list_nodes(request: Request, ctx: AppContext) -> Response:
    """Node reputation: {"nodes": [{cluster, name, state, excluded, suspectUntil, jobs, ..., evidence}]}."""
    state = (_text(request, "state") or "").upper() or None
    async with ctx.sessions() as session:
        rows = await fleet_queries.node_overview(session, cluster=_text(request, "cluster"))
    nodes = [
        {**node, "evidence": [_NODE_EVIDENCE(b) for b in blames]}
        for node, blames in ((_NODE(row), blames) for row, blames in rows)
        if state is None or node["state"] == state
    ]
    return JSONResponse({"nodes": nodes})
