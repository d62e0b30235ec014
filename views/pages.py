"""Workflows Overview, a workflow's jobs and attempts, a job, Job Details and Timeline pages."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from app.advice import queries as advice_queries
from app.advice import stories
from app.advice.queries import OverviewFilter
from app.audit import queries as audit_queries
from app.domain.control.identity import parse_scheduler_job_id
from app.domain.edge import bounds
from app.domain.edge.bounds import check_time
from app.domain.edge.cursor import CursorError
from app.domain.edge.timefmt import iso_utc
from app.domain.presentation.story import OUTCOMES, shown_reason
from app.evidence import queries as evidence_queries
from app.fleet import queries as fleet_queries
from app.infra.db import Session, utcnow
from app.infra.pagination import PageArgumentError, PageRequest
from app.jobs import queries as job_queries
from app.jobs.queries import JobFilter, WorkflowFilter
from app.leases import queries as lease_queries
from views import goodput as goodput_views
from views.auth import guarded
from views.find import workflow_path
from views.inputs import query_text
from views.render import dashboard_of, explain, render
from views.serialize import attempt_json
from views.timeline import Mark, Row, legend_items, render_timeline, state_spans, time_window
from views.urls import current_url

PAGE_SIZE = 50
ATTEMPTS_PER_JOB = 100
STATES = (
    "PENDING",
    "RUNNING",
    "COMPLETING",
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "REQUEUE_HOLD",
    "REQUEUED",
    "UNKNOWN",
)


@dataclass
class WorkflowSummary:
    """What the overview shows beside a workflow row besides its denormalised columns."""

    last_anomaly: Any = None
    last_anomaly_ref: tuple[int, int] | None = None  # (slurm job id, attempt index)
    active_advice: list[Any] = field(default_factory=list)
    latest_job: Any = None
    told: Any = None  # app.advice.stories.Told of the latest job's headline attempt
    latest_attempts: int = 0  # attempts of the latest job (never summed across the workflow's jobs)


async def workflow_summaries(session: Session, *, workflow_ids: Sequence[int]) -> dict[int, WorkflowSummary]:
    """Newest anomaly, active Advice, latest job, its attempt count and story: a fixed number of statements a page."""
    newest = await evidence_queries.newest_anomaly_of_workflows(session, workflow_ids=workflow_ids)
    active = await advice_queries.active_advice_of_workflows(session, workflow_ids=workflow_ids)
    latest = await job_queries.latest_jobs_of_workflows(session, workflow_ids=workflow_ids)
    told = await stories.stories_of_jobs(session, job_ids=[j.id for j in latest.values()])
    counts = await job_queries.count_attempts_of_jobs(session, job_ids=[j.id for j in latest.values()])
    result = {}
    for wid in workflow_ids:
        found = newest.get(wid)
        job = latest.get(wid)
        result[wid] = WorkflowSummary(
            last_anomaly=found[0] if found else None,
            last_anomaly_ref=(found[1], found[2]) if found else None,
            active_advice=active.get(wid, []),
            latest_job=job,
            told=stories.headline(told.get(job.id, [])) if job else None,
            latest_attempts=counts.get(job.id, 0) if job else 0,
        )
    return result


def page_request(request: Request, size: int = PAGE_SIZE) -> PageRequest:
    """first/after or last/before from the query string (cursors are opaque keyset tokens)."""
    before = request.query_params.get("before") or None
    if before:
        return PageRequest.build(last=size, before=before)
    return PageRequest.build(first=size, after=request.query_params.get("after") or None)


def _query_without_cursor(request: Request) -> dict[str, str]:
    return {k: v for k, v in request.query_params.items() if k not in {"after", "before"} and v}


@guarded()
async def workflows(request: Request) -> Response:
    """Workflows Overview: newest first, filtered, keyset-paginated, live."""
    dashboard = dashboard_of(request)
    q = request.query_params
    cap = bounds.MAX_FILTER_LENGTH
    flt = WorkflowFilter(
        cluster=(q.get("cluster") or "")[:cap] or None,
        environment=(q.get("environment") or "")[:cap] or None,
        state=(q.get("state") or "")[:cap] or None,
        search=(q.get("q") or "").strip()[: bounds.MAX_SEARCH_LENGTH] or None,
        failed_only=q.get("failed") in {"1", "true", "on"},
    )
    outcome = (q.get("outcome") or "").strip()
    facet = OverviewFilter(
        outcome=outcome if outcome in OUTCOMES else None,
        category=(q.get("category") or "")[:cap] or None,
        rule=(q.get("rule") or "")[:cap] or None,
    )
    error = None
    if flt.state and flt.state not in STATES:
        error = f"There is no state {flt.state!r}; showing every state. States: {', '.join(STATES)}."
        flt = replace(flt, state=None)
    if outcome and facet.outcome is None:
        error = f"Unknown outcome {outcome[:40]!r}: choose one of {', '.join(OUTCOMES)}; showing every outcome."
    filtered = any(
        [flt.cluster, flt.environment, flt.state, flt.search, flt.failed_only, outcome, facet.category, facet.rule]
    )
    async with dashboard.ctx.sessions() as session:
        try:
            page = await advice_queries.list_overview(
                session, workflows=flt, overview=facet, page=page_request(request)
            )
        except (CursorError, PageArgumentError):
            error = "That page link is no longer valid; showing the first page."
            page = await advice_queries.list_overview(
                session, workflows=flt, overview=facet, page=PageRequest.build(first=PAGE_SIZE)
            )
        summaries = await workflow_summaries(session, workflow_ids=[w.id for w in page.items])
        facets = await advice_queries.overview_facets(session, workflows=flt, overview=facet)
        extra: dict[str, Any] = {}
        if not request.headers.get("hx-request") or request.headers.get("hx-history-restore-request"):
            clusters, environments = await job_queries.workflow_filter_choices(session)
            # one statement: the overview's query count stays fixed (tests/views/test_scale.py)
            workers = await lease_queries.worker_leases(session)
            every = sorted(set(clusters) | set(workers))
            extra = {
                "clusters": every,
                "cluster_workers": [(name, workers.get(name)) for name in every],
                "now": utcnow(),
                "environments": environments,
            }
            extra["not_enrolled"], extra["not_enrolled_total"] = await job_queries.not_enrolled_with_total(session)
    query = _query_without_cursor(request)
    return render(
        request,
        "workflows.html",
        {
            # a column whose value is the same on every row is said once above the table instead
            "show_cluster": len({w.cluster for w in page.items}) > 1,
            "show_environment": len({w.environment for w in page.items}) > 1,
            "page": page,
            "summaries": summaries,
            "filter": flt,
            "facet": facet,
            "facets": facets,
            "filtered": filtered,
            "query": query,
            "error": error,
            "states": STATES,
            "self_url": current_url(request),
            "storm_pauses": await _storm_pauses(dashboard),
            **extra,
        },
        partial="_workflow_table.html",
    )


async def _storm_pauses(dashboard: Any) -> list[Any]:
    """Open restart-storm pauses, for the banner (views/templates/_storm_banner.html)."""
    async with dashboard.ctx.sessions() as session:
        return await fleet_queries.pauses(session, only_open=True)


@guarded()
async def workflow(request: Request) -> Response:
    """One workflow: its jobs (newest first) and each job's attempts in order."""
    dashboard = dashboard_of(request)
    # /dashboard/workflow/?id=KEY names the ids no path segment can hold ("." and "..", see views/urls.py).
    key = bounds.check_text(
        request.path_params["key"] or request.query_params.get("id") or "", "workflow id", maximum=bounds.MAX_KEY_LENGTH
    )
    assert key is not None
    cluster = query_text(request, "cluster")
    async with dashboard.ctx.sessions() as session:
        same_key = await job_queries.find_workflows_by_key(session, key=key)
        if cluster:
            same_key = [w for w in same_key if w.cluster == cluster] + [w for w in same_key if w.cluster != cluster]
        found = same_key[0] if same_key else None
        if found is None and bounds.is_ascii_digits(key) and len(key) <= 18:
            # The old URLs named the internal record number: send them to the workflow id's URL.
            old = (await job_queries.workflows_by_ids(session, ids=[int(key)])).get(int(key))
            if old is not None:
                return RedirectResponse(workflow_path(request, old.workflow_key, old.cluster), status_code=301)
        if found is None:
            similar = await job_queries.similar_workflows(session, text=key, limit=5)
            return explain(
                request,
                title="Unknown workflow",
                status=404,
                message=f"No workflow with id {key[:80]!r} is recorded.",
                hint="A workflow id is the workflow_id of the jobs' APS comment (case-sensitive).",
                links=[(f"workflow {w.workflow_key}", workflow_path(request, w.workflow_key)) for w in similar]
                + [("Workflows Overview", request.url_for("dashboard:workflows").path)],
            )
        workflow_id = found.id
        try:
            jobs = await job_queries.list_jobs(
                session, filter=JobFilter(workflow_id=workflow_id), page=page_request(request, 25)
            )
        except (CursorError, PageArgumentError):
            jobs = await job_queries.list_jobs(
                session, filter=JobFilter(workflow_id=workflow_id), page=PageRequest.build(first=25)
            )
        blocks = await _job_blocks(session, list(jobs.items))
        goodput = await goodput_views.workflow_goodput(session, workflow_id=workflow_id)
    return render(
        request,
        "workflow.html",
        {
            "workflow": found,
            "same_key": [w for w in same_key if w.id != found.id],
            "goodput": goodput,
            "jobs": jobs,
            "blocks": blocks,
            "self_url": current_url(request),
        },
        partial="_workflow_jobs.html",
    )


def _told_anomaly(told: Any) -> Any:
    return told.anomaly if told is not None else None


async def _job_blocks(session: Any, jobs: list[Any]) -> list[dict[str, Any]]:
    """Each job with its attempts, their Advice and newest anomaly: four statements for any number of jobs."""
    job_ids = [job.id for job in jobs]
    attempts = await job_queries.first_attempts_of_jobs(session, job_ids=job_ids, limit=ATTEMPTS_PER_JOB)
    attempt_ids = [a.id for rows in attempts.values() for a in rows]
    advice = await advice_queries.advice_of_attempts(session, attempt_ids=attempt_ids)
    anomalies = await evidence_queries.latest_anomalies_of_attempts(session, attempt_ids=attempt_ids, limit=1)
    policies = await job_queries.policies_by_job_ids(session, job_ids=job_ids)
    told = await stories.stories_of_jobs(session, job_ids=job_ids)
    by_attempt = {t.attempt.id: t for rows in told.values() for t in rows}
    return [
        {
            "job": job,
            "policy": policies.get(job.id),
            "told": stories.headline(told.get(job.id, [])),
            "attempts": [
                {
                    "attempt": a,
                    "advice": advice.get(a.id),
                    # the anomaly the story cites (the one the Advice was decided on), else the newest
                    "anomaly": _told_anomaly(by_attempt.get(a.id)) or next(iter(anomalies.get(a.id) or []), None),
                    "told": by_attempt.get(a.id),
                }
                for a in attempts.get(job.id, [])
            ],
        }
        for job in jobs
    ]


@guarded()
async def job(request: Request) -> Response:
    """A Slurm job id: its enrolment (or why it was refused), its attempts, and its array's other tasks."""
    dashboard = dashboard_of(request)
    slurm_job_id = request.path_params["job_id"]
    async with dashboard.ctx.sessions() as session:
        found = await job_queries.find_job(session, slurm_job_id=slurm_job_id)
        if found is None:
            return _unknown_job(request, slurm_job_id)
        blocks = await _job_blocks(session, [found])
        workflow = (
            await job_queries.workflows_by_ids(session, ids=[found.workflow_id] if found.workflow_id else [])
        ).get(found.workflow_id or 0)
        tasks = await job_queries.array_tasks(session, job=found)
    return render(request, "job.html", {"block": blocks[0], "workflow": workflow, "array_tasks": tasks})


@guarded()
async def find_job(request: Request) -> Response:
    """The job box: `12345`, or `12345_7` for task 7 of array 12345, leads to that job's page."""
    raw = (request.query_params.get("job") or request.path_params.get("ref") or "").strip()
    ref = parse_scheduler_job_id(raw)
    if ref is None:
        return explain(
            request,
            title="Not a job id",
            status=400,
            message=f"{raw[:40]!r} is not a Slurm job id.",
            hint="Enter a job id such as 12345, or 12345_7 for task 7 of job array 12345.",
            links=[("Workflows Overview", request.url_for("dashboard:workflows").path)],
        )
    async with dashboard_of(request).ctx.sessions() as session:
        found = await job_queries.find_job_by_scheduler_id(session, ref=ref)
    if found is None:
        return _unknown_job(request, str(ref))
    return RedirectResponse(request.url_for("dashboard:job", job_id=found.slurm_job_id).path, status_code=303)


def _unknown_job(request: Request, slurm_job_id: int | str, detail: str = "") -> Response:
    return explain(
        request,
        title="Unknown job",
        status=404,
        message=f"No job {slurm_job_id} is recorded{detail}.",
        hint="Jobs appear after the observer sees them in squeue with an APS policy in their --comment. "
        "Check the job id, the stored comment (scontrol show job) and that its partition is managed.",
        links=[("Workflows Overview", request.url_for("dashboard:workflows").path)],
    )


async def _load_attempt(request: Request, session: Any) -> tuple[Any, Response | None]:
    params = request.path_params
    if "uuid" in params:
        attempt = await job_queries.find_attempt_by_uuid(session, uuid=params["uuid"])
        if attempt is None:
            return None, explain(
                request,
                title="Unknown attempt",
                status=404,
                message=f"No attempt has the id {params['uuid']}.",
                links=[("Workflows Overview", request.url_for("dashboard:workflows").path)],
            )
        return attempt, None
    slurm_job_id, index = params["job_id"], params["attempt_index"]
    attempt = await job_queries.find_attempt(session, slurm_job_id=slurm_job_id, attempt_index=index)
    if attempt is None:
        job = await job_queries.find_job(session, slurm_job_id=slurm_job_id)
        if job is None:
            return None, _unknown_job(request, slurm_job_id)
        known = await job_queries.count_attempts_of_jobs(session, job_ids=[job.id])
        return None, explain(
            request,
            title="Unknown attempt",
            status=404,
            message=f"Job {slurm_job_id} has no attempt {index}; {known.get(job.id, 0)} attempt(s) "
            f"are recorded (attempt 0 is the first execution).",
            links=[(f"Job {slurm_job_id}", request.url_for("dashboard:job", job_id=slurm_job_id).path)],
        )
    return attempt, None


@guarded()
async def attempt_details(request: Request) -> Response:
    """Job Details of one attempt (also `?format=json` for the raw record)."""
    dashboard = dashboard_of(request)
    async with dashboard.ctx.sessions() as session:
        attempt, problem = await _load_attempt(request, session)
        if problem is not None:
            return problem
        job = (await job_queries.jobs_by_ids(session, ids=[attempt.job_id]))[attempt.job_id]
        policy = (await job_queries.policies_by_job_ids(session, job_ids=[job.id])).get(job.id)
        workflow = (
            await job_queries.workflows_by_ids(session, ids=[attempt.workflow_id] if attempt.workflow_id else [])
        ).get(attempt.workflow_id or 0)
        siblings = await job_queries.list_attempts_of_job(session, job_id=job.id, page=PageRequest.build(first=100))
        checkpoints = await evidence_queries.list_checkpoints(
            session, attempt_id=attempt.id, page=PageRequest.build(first=100)
        )
        anomalies = await evidence_queries.list_anomalies(
            session, attempt_id=attempt.id, page=PageRequest.build(first=100)
        )
        advice = (await advice_queries.advice_of_attempts(session, attempt_ids=[attempt.id])).get(attempt.id)
        milestones = (
            (await advice_queries.milestones_of_advice(session, advice_ids=[advice.id])).get(advice.id, [])
            if advice
            else []
        )
        told = (await stories.stories_of_jobs(session, job_ids=[job.id])).get(job.id, [])
        refused_logs = await evidence_queries.refused_log_files(session, attempt_id=attempt.id, job_id=job.id)
        stack_capture = await evidence_queries.stack_capture_of_attempt(session, attempt_id=attempt.id)
    mine = next((t for t in told if t.attempt.id == attempt.id), None)
    caused_by = next((t for t in told if t.next_attempt is not None and t.next_attempt.id == attempt.id), None)
    raw = attempt_json(
        attempt=attempt,
        job=job,
        policy=policy,
        workflow=workflow,
        checkpoints=list(checkpoints.items),
        anomalies=list(anomalies.items),
        advice=advice,
        milestones=milestones,
    )
    if request.query_params.get("format") == "json":
        return JSONResponse(raw, headers={"Cache-Control": "no-store"})
    return render(
        request,
        "attempt.html",
        {
            "attempt": attempt,
            "job": job,
            "policy": policy,
            "workflow": workflow,
            "siblings": siblings.items,
            "checkpoints": checkpoints,
            "anomalies": anomalies,
            "advice": advice,
            "milestones": milestones,
            "told": mine,
            "caused_by": caused_by if caused_by and (caused_by.advice or caused_by.anomaly) else None,
            "raw": raw,
            "now": utcnow(),
            "self_url": current_url(request, with_query=False),
            "refused_logs": refused_logs,
            "stack_capture": stack_capture,
        },
        partial="_attempt_details.html",
    )


def audit_views_off(request: Request, view: str) -> Response:
    """Timeline and Audit Events when the operator turned them off: say so (404 with the reason)."""
    return explain(
        request,
        title=f"{view} is turned off",
        status=404,
        message=f"The operator has turned the audit views off (RECOVERY_AUDIT_VIEWS_ENABLED=false), "
        f"so {view} is not available on this installation.",
        hint="Job Details still shows each attempt's state, checkpoints, anomalies and Advice. Ask "
        "the operator to enable audit views to see events.",
        links=[("Workflows Overview", request.url_for("dashboard:workflows").path)],
    )


@guarded()
async def timeline(request: Request) -> Response:
    """Timeline: the attempt and its sibling attempts on one UTC axis (an SVG rendered here)."""
    dashboard = dashboard_of(request)
    if not dashboard.settings.audit_views_enabled:
        return audit_views_off(request, "Timeline")
    async with dashboard.ctx.sessions() as session:
        attempt, problem = await _load_attempt(request, session)
        if problem is not None:
            return problem
        job = (await job_queries.jobs_by_ids(session, ids=[attempt.job_id]))[attempt.job_id]
        siblings = list(
            (await job_queries.list_attempts_of_job(session, job_id=job.id, page=PageRequest.build(first=100))).items
        )
        ids = [a.id for a in siblings]
        events = await audit_queries.timeline_events(
            session,
            cluster=job.cluster,
            slurm_job_id=job.slurm_job_id,
            since=job.created_at if job.incarnation else None,
        )
        anomalies = await evidence_queries.latest_anomalies_of_attempts(session, attempt_ids=ids, limit=200)
        checkpoints = await evidence_queries.latest_checkpoints_of_attempts(session, attempt_ids=ids, limit=200)
        advice = await advice_queries.advice_of_attempts(session, attempt_ids=ids)
        milestones = await advice_queries.milestones_of_advice(session, advice_ids=[a.id for a in advice.values()])
        workflow = (await job_queries.workflows_by_ids(session, ids=[job.workflow_id] if job.workflow_id else [])).get(
            job.workflow_id or 0
        )
    now = utcnow()
    rows = build_rows(
        request,
        focus=attempt,
        attempts=siblings,
        events=events,
        anomalies=anomalies,
        checkpoints=checkpoints,
        advice=advice,
        milestones=milestones,
    )
    # Every mark links to its row in the events table (#ev-N), numbered in time order.
    order = sorted(
        ((i, j) for i, row in enumerate(rows) for j in range(len(row.marks))), key=lambda p: rows[p[0]].marks[p[1]].at
    )
    for n, (i, j) in enumerate(order, start=1):
        rows[i].marks[j] = replace(rows[i].marks[j], anchor=f"ev-{n}")
    marks = [(rows[i].attempt_index, rows[i].marks[j]) for i, j in order]
    zoom = timeline_zoom(request, rows=rows, focus=attempt, now=now)
    return render(
        request,
        "timeline.html",
        {
            "attempt": attempt,
            "job": job,
            "workflow": workflow,
            "svg": render_timeline(rows, now=now, start=zoom.start, end=zoom.end),
            "zoom": zoom,
            "marks": marks,
            "legend": legend_items(),
            "now": now,
            "running": any(row.open_ended for row in rows),
            "self_url": current_url(request, with_query=False),
        },
        partial="_timeline.html",
    )


@dataclass
class Zoom:
    """The timeline's window: the whole job, the focus attempt, or a chosen `from`..`to` (all plain GET links)."""

    start: dt.datetime | None = None
    end: dt.datetime | None = None
    scope: str = "all"  # all | attempt | range
    error: str | None = None
    links: dict[str, dict[str, str]] = field(default_factory=dict)  # name -> query
    start_text: str = ""
    end_text: str = ""


def _parse_utc(text: str) -> dt.datetime:
    value = text.strip().replace(" ", "T")
    value = value[:-1] + "+00:00" if value.endswith("Z") else value
    parsed = dt.datetime.fromisoformat(value)
    return parsed.replace(tzinfo=dt.UTC) if parsed.tzinfo is None else parsed.astimezone(dt.UTC)


def timeline_zoom(request: Request, *, rows: list[Row], focus: Any, now: dt.datetime) -> Zoom:
    """`?zoom=attempt`, or `?from=…&to=…` (UTC); zoom in/out links halve or double the window around its middle."""
    q = request.query_params
    zoom = Zoom()
    full = time_window(rows, now=now)
    if q.get("from") or q.get("to"):
        try:
            start = check_time(_parse_utc(q["from"][:64]), "from") if q.get("from") else full[0]
            end = check_time(_parse_utc(q["to"][:64]), "to") if q.get("to") else full[1]
            if end <= start:
                raise ValueError("To must be later than From")
            zoom.start, zoom.end, zoom.scope = start, end, "range"
        except (ValueError, OverflowError) as exc:
            zoom.error = (
                f"That time range cannot be used ({str(exc)[:80]}); showing the whole job. "
                "Times are UTC, e.g. 2025-01-31T12:00."
            )
    elif q.get("zoom") == "attempt":
        own = [r for r in rows if r.focus]
        zoom.start, zoom.end = time_window(own, now=now) if own else full
        zoom.scope = "attempt"
    elif q.get("zoom") not in (None, "", "all"):
        zoom.error = "zoom is 'attempt' or 'all'; showing the whole job."
    start, end = (zoom.start, zoom.end) if zoom.start and zoom.end else full
    middle, half = start + (end - start) / 2, (end - start) / 2

    def window(a: dt.datetime, b: dt.datetime) -> dict[str, str]:
        return {"from": iso_utc(a.replace(microsecond=0)), "to": iso_utc(b.replace(microsecond=0))}

    try:
        zoom.links = {
            "in": window(middle - half / 2, middle + half / 2),
            "out": window(middle - half * 2, middle + half * 2),
            "earlier": window(start - half, end - half),
            "later": window(start + half, end + half),
        }
    except OverflowError:  # a window at the end of representable time: no relative links
        zoom.links = {}
    zoom.start_text, zoom.end_text = (iso_utc(t.replace(microsecond=0)) for t in (start, end))
    return zoom


def build_rows(
    request: Request,
    *,
    focus: Any,
    attempts: list[Any],
    events: list[Any],
    anomalies: dict[int, list[Any]],
    checkpoints: dict[int, list[Any]],
    advice: dict[int, Any],
    milestones: dict[int, list[Any]],
) -> list[Row]:
    """Timeline rows from stored records: state spans from state-change events, everything else as marks."""
    history: dict[int, list[tuple[dt.datetime, str]]] = {}
    verifications: dict[int, list[Mark]] = {}
    index_of = {a.id: a.attempt_index for a in attempts}
    observed_only = {index_of[aid]: adv.mode == "observe" for aid, adv in advice.items() if aid in index_of}
    for event in events:
        if event.attempt_index is None:
            continue
        if event.event_type in audit_queries.TIMELINE_EVENT_TYPES:
            state = (event.payload or {}).get("to") or (event.payload or {}).get("state")
            if state:
                history.setdefault(event.attempt_index, []).append((event.produced_at, str(state)))
        else:
            if event.event_type == audit_queries.CHECKPOINT_CHECK_EVENT:
                verifications.setdefault(event.attempt_index, []).append(
                    Mark("checkpoint", event.produced_at, f"{event.event_type}: {event.message}")
                )
                continue
            shadow = event.event_type == "reconciliation.shadow" or (
                observed_only.get(event.attempt_index, False) and event.event_type != "reconciliation.abandoned"
            )
            verifications.setdefault(event.attempt_index, []).append(
                Mark(
                    "shadow-verification" if shadow else "verification",
                    event.produced_at,
                    ("observe only, nothing was done: " if shadow else "") + f"{event.event_type}: {event.message}",
                )
            )
    rows = []
    for a in attempts:
        silences = [
            (start, x.detected_at, f"{x.kind} {x.category}")
            for x in anomalies.get(a.id, [])
            if x.kind == "NO_PROGRESS" and (start := _silence_start(x)) is not None and start < x.detected_at
        ]
        spans, terminal = state_spans(
            state=a.state,
            start=a.start_time,
            end=a.end_time,
            created=a.created_at,
            history=history.get(a.attempt_index, []),
        )
        marks = [
            Mark(
                "anomaly", x.source_time or x.detected_at, f"{x.kind} {x.category}: {x.message or x.line or ''}".strip()
            )
            for x in anomalies.get(a.id, [])
        ]
        marks += [
            Mark(
                "checkpoint",
                c.source_time or c.read_time,
                f"{c.kind} {c.path or ''} iteration {c.iteration if c.iteration is not None else '?'}",
            )
            for c in checkpoints.get(a.id, [])
        ]
        found = advice.get(a.id)
        if found is not None:
            excl = f", exclude {', '.join(found.exclusions)}" if found.exclusions else ""
            marks.append(
                Mark(
                    "advice",
                    found.created_at,
                    f"{found.operation} generation {found.generation}{excl} ({found.mode}): "
                    f"{shown_reason(found.reason, found.mode)}",
                )
            )
            for m in milestones.get(found.id, []):
                if m.status == "SHADOW":
                    marks.append(
                        Mark("shadow", m.started_at, f"observe only, not run: {m.step} (generation {m.generation})")
                    )
                    continue
                marks.append(
                    Mark(
                        "action",
                        m.started_at,
                        f"{m.step} {m.status} (generation {m.generation})",
                        end=m.finished_at,
                        took_ms=m.duration_ms,
                    )
                )
        marks += verifications.get(a.attempt_index, [])
        rows.append(
            Row(
                label=f"attempt {a.attempt_index}",
                attempt_index=a.attempt_index,
                focus=a.id == focus.id,
                href=request.url_for("dashboard:timeline", job_id=a.slurm_job_id, attempt_index=a.attempt_index).path,
                spans=spans,
                marks=marks,
                terminal=terminal,
                silences=silences,
            )
        )
    return rows


def _silence_start(anomaly: Any) -> dt.datetime | None:
    """When the log went silent: the hang detector's lastOutputAt, else the last progress line's time."""
    raw = (anomaly.details or {}).get("lastOutputAt")
    if raw:
        try:
            return _parse_utc(str(raw))
        except ValueError:
            pass
    return anomaly.source_time
