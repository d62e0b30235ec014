"""Audit Events: SPEC §7 filters from a shareable GET form, cursor pagination, errors beside their fields."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from app.audit import queries as audit_queries
from app.audit.queries import COMPONENTS, LEVELS, AuditFilter, AuditFilterError, parse_job_reference
from app.domain.control.identity import parse_scheduler_job_id
from app.domain.edge.bounds import check_time
from app.domain.edge.cursor import CursorError
from app.infra.pagination import PageArgumentError, PageRequest
from app.jobs import queries as job_queries
from views.auth import guarded
from views.pages import audit_views_off
from views.render import dashboard_of, render
from views.urls import current_url

PAGE_SIZE = 50
FILTER_FIELDS = ("job", "component", "event_type", "level", "from", "to", "order")


def parse_time(text: str) -> dt.datetime:
    """A UTC time from the form: `2025-01-31T12:00`, with seconds, or full ISO 8601 with a zone."""
    value = text.strip().replace(" ", "T")
    if value.endswith("Z"):
        value = value[:-1] + "+00:00"
    parsed = dt.datetime.fromisoformat(value)
    return check_time(parsed.replace(tzinfo=dt.UTC) if parsed.tzinfo is None else parsed, "time")


def read_filters(params: Any) -> tuple[dict[str, str], AuditFilter | None, dict[str, str]]:
    """(the form values, the filter or None, errors by field name)."""
    values = {name: (params.get(name) or "").strip()[:200] for name in FILTER_FIELDS}
    errors: dict[str, str] = {}
    kwargs: dict[str, Any] = {}
    if values["job"]:
        try:
            kwargs["slurm_job_id"], kwargs["attempt_index"] = parse_job_reference(values["job"])
        except AuditFilterError as exc:
            errors["job"] = f"{exc}. Enter a job id such as 12345, or 12345/0 for one attempt."
    if values["component"]:
        if values["component"] not in COMPONENTS:
            errors["component"] = f"unknown component; choose one of {', '.join(COMPONENTS)}"
        kwargs["component"] = values["component"]
    if values["event_type"]:
        # `checkpoint.` (or `checkpoint`) matches every checkpoint.* type; a full type matches itself.
        kwargs["event_type_family"] = values["event_type"]
    if values["level"]:
        if values["level"] not in LEVELS:
            errors["level"] = f"level must be one of {', '.join(LEVELS)}"
        else:
            kwargs["level"] = values["level"]
    for field, key in (("from", "produced_after"), ("to", "produced_before")):
        if values[field]:
            try:
                kwargs[key] = parse_time(values[field])
            except ValueError as exc:  # BoundsError is a ValueError too
                errors[field] = f"expected a UTC time such as 2025-01-31T12:00 ({str(exc)[:80]})"
    if (
        "produced_after" in kwargs
        and "produced_before" in kwargs
        and kwargs["produced_after"] >= kwargs["produced_before"]
    ):
        errors["to"] = "must be later than From"
    if values["order"] not in ("", "newest", "oldest"):
        errors["order"] = "order is newest or oldest"
    if errors:
        return values, None, errors
    try:
        return values, AuditFilter(**kwargs), errors
    except AuditFilterError as exc:
        return values, None, {"job": str(exc)}


async def _array_task_as_job_id(dashboard: Any, query: Any) -> tuple[dict[str, str], str | None]:
    """The filters with `151_2` (or `151_2/0`) in the job box replaced by that task's own job id.

    Returns (params, the task's name when no such task is recorded)."""
    params = {key: query.get(key) or "" for key in query.keys()}
    job, sep, attempt = (params.get("job") or "").strip().partition("/")
    ref = parse_scheduler_job_id(job) if "_" in job else None
    if ref is None:
        return params, None
    async with dashboard.ctx.sessions() as session:
        found = await job_queries.find_job_by_scheduler_id(session, ref=ref)
    if found is None:
        return params, str(ref)
    params["job"] = f"{found.slurm_job_id}{sep}{attempt}"
    return params, None


TYPES_TTL_SECONDS = 30.0


async def _event_types(dashboard: Any, session: Any) -> list[tuple[str, int]]:
    """The event types that occur, with counts; recomputed at most every 30 s (one GROUP BY over the table)."""
    cached = dashboard.extra.get("audit_types")
    now = time.monotonic()
    if cached is not None and now - cached[0] < TYPES_TTL_SECONDS:
        return list(cached[1])
    types = await audit_queries.event_type_counts(session)
    dashboard.extra["audit_types"] = (now, types)
    return types


@guarded()
async def audit_events(request: Request) -> Response:
    """Audit Events page (full, or the `_audit.html` partial for htmx); filters always restart at the first page."""
    dashboard = dashboard_of(request)
    if not dashboard.settings.audit_views_enabled:
        return audit_views_off(request, "Audit Events")
    params, unknown_task = await _array_task_as_job_id(dashboard, request.query_params)
    values, flt, errors = read_filters(params)
    if unknown_task:
        values["job"], flt, errors["job"] = unknown_task, None, f"no array task {unknown_task} is recorded"
    elif params.get("job") != request.query_params.get("job"):
        values["job"] = (request.query_params.get("job") or "").strip()[:200]
    page = None
    before = request.query_params.get("before") or None
    after = request.query_params.get("after") or None
    if flt is not None:
        request_page = (
            PageRequest.build(last=PAGE_SIZE, before=before)
            if before
            else PageRequest.build(first=PAGE_SIZE, after=after)
        )
        async with dashboard.ctx.sessions() as session:
            try:
                page = await audit_queries.query(
                    session, filter=flt, page=request_page, descending=values["order"] != "oldest"
                )
            except (CursorError, PageArgumentError):
                errors["page"] = "That page link is not valid (it may belong to other filters); showing the first page."
                page = await audit_queries.query(
                    session, filter=flt, page=PageRequest.build(first=PAGE_SIZE), descending=values["order"] != "oldest"
                )
    total: tuple[int, bool] | None = None
    async with dashboard.ctx.sessions() as session:
        if page is not None and page.items:
            assert flt is not None
            total = await audit_queries.count_matching(session, filter=flt)
        types = await _event_types(dashboard, session)
    applied = {k: v for k, v in values.items() if v}
    first_page = not (before or after) or "page" in errors
    return render(
        request,
        "audit.html",
        {
            "values": values,
            "errors": errors,
            "page": page,
            "applied": applied,
            "components": COMPONENTS,
            "levels": LEVELS,
            "filtered": bool(applied),
            "on_first_page": first_page,
            "total": total,
            "event_types": types,
            "live": first_page and values["order"] != "oldest" and page is not None,
            "self_url": current_url(request),
            "live_job": flt.slurm_job_id if flt is not None else None,
        },
        partial="_audit.html",
    )
