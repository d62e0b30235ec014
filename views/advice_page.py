"""Advice list (active / all) and the operator's review actions (approve, veto, re-run reconciliation)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from app.advice import queries as advice_queries
from app.advice import review
from app.advice.queries import AdviceFilter
from app.auth import OPERATOR
from app.domain import bounds
from app.domain.cursor import CursorError
from app.fleet import queries as fleet_queries
from app.jobs import queries as job_queries
from app.pagination import PageArgumentError, PageRequest
from views.auth import guarded
from views.pages import page_request
from views.render import dashboard_of, explain, is_partial_request, render

ACTIONS = ("approve", "veto", "rerun")


@guarded()
async def advice_list(request: Request) -> Response:
    """Advice, newest first: only active (may still need reconciliation) by default, or all."""
    dashboard = dashboard_of(request)
    show = "all" if request.query_params.get("show") == "all" else "active"
    flt = AdviceFilter(only_active=show == "active")
    async with dashboard.ctx.sessions() as session:
        try:
            page = await advice_queries.list_advice(session, filter=flt, page=page_request(request))
        except (CursorError, PageArgumentError):
            page = await advice_queries.list_advice(session, filter=flt, page=PageRequest.build(first=50))
        jobs = await job_queries.jobs_by_ids(session, ids=[a.job_id for a in page.items])
        storm_pauses = await fleet_queries.pauses(session, only_open=True)
    return render(
        request,
        "advice.html",
        {
            "page": page,
            "jobs": jobs,
            "show": show,
            "storm_pauses": storm_pauses,
            "self_url": request.url.path + (f"?{request.url.query}" if request.url.query else ""),
        },
        partial="_advice_table.html",
    )


@guarded(OPERATOR)
async def advice_action(request: Request) -> Response:
    """Approve, veto (with a reason) or re-run reconciliation of one Advice; an audit event names the operator."""
    dashboard = dashboard_of(request)
    action, advice_id = request.path_params["action"], request.path_params["advice_id"]
    if action not in ACTIONS:
        return explain(
            request,
            title="Unknown action",
            status=404,
            message=f"{action!r} is not an Advice action ({', '.join(ACTIONS)}).",
        )
    principal = request.state.principal
    form = await request.form()
    reason = form.get("reason")
    message, failed = "", False
    async with dashboard.ctx.sessions() as session:
        try:
            async with session.begin():
                if action == "approve":
                    await review.approve_advice(session, advice_id=advice_id, user=principal.name)
                    message = "Approved."
                elif action == "veto":
                    await review.veto_advice(
                        session,
                        advice_id=advice_id,
                        user=principal.name,
                        reason=reason[: bounds.MAX_REASON_LENGTH] if isinstance(reason, str) else "",
                    )
                    message = "Vetoed."
                else:
                    await review.rerun_reconciliation(session, advice_id=advice_id, user=principal.name)
                    message = "Reconciliation requested."
        except review.ReviewError as exc:
            if exc.not_found:
                return explain(request, title="Unknown Advice", status=404, message=str(exc))
            message, failed = str(exc), True
        current = await advice_queries.get_advice(session, advice_id=advice_id)
        jobs = await job_queries.jobs_by_ids(session, ids=[current.job_id] if current else [])
    if is_partial_request(request):
        context = {"advice": current, "jobs": jobs, "message": message, "failed": failed}
        return render(request, "_advice_row.html", context, status=200)
    if failed:
        return explain(
            request,
            title="Action refused",
            status=409,
            message=message,
            links=[("Advice", request.url_for("dashboard:advice").path)],
        )
    return RedirectResponse(request.url_for("dashboard:advice").path + "?show=all", status_code=303)
