"""Advice list (active / all) and the operator's review actions (approve, veto, re-run reconciliation, decide again
now)."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from app.advice import queries as advice_queries
from app.advice import review
from app.advice.queries import AdviceFilter
from app.auth import OPERATOR
from app.domain.admission.mode import effective_mode
from app.domain.edge import bounds
from app.domain.edge.cursor import CursorError
from app.fleet import queries as fleet_queries
from app.infra.pagination import PageArgumentError, PageRequest
from app.jobs import queries as job_queries
from views.auth import guarded
from views.pages import page_request
from views.render import dashboard_of, explain, is_partial_request, render
from views.templating import url_path
from views.urls import current_url

ACTIONS = ("approve", "veto", "rerun", "decide_again")


def actions_for(advice: Any, mode_now: str | None = None) -> tuple[str, ...]:
    """The review actions that apply to this Advice now (the page offers only these); `mode_now` is its job's mode."""
    if advice is None or advice.review == review.VETOED:
        return ()
    found: list[str] = []
    if mode_now == "act" and advice.mode != "act" and advice.superseded_by_id is None:
        found.append("decide_again")  # decided in observe mode, act now; whether it is recent is checked on submit
    if advice.active:
        if advice.review != review.APPROVED:
            found.append("approve")
        found += ["veto", "rerun"]
    elif advice.disposition == "ABANDONED" and advice.disposition_reason in review.TRANSIENT_ABANDON_REASONS:
        found.append("rerun")
    return tuple(found)


def result_message(action: str, advice: Any, mode: str | None) -> tuple[str, str]:
    """(what the action did, what it cannot do) in plain words, for the result banner."""
    if advice is None:
        return "", ""
    name = f"Advice {advice.id} ({advice.operation} {advice.slurm_job_id}/{advice.attempt_index})"
    if action == "approve":
        cannot = (
            "Approval cannot make it act: the job is in observe mode, so Recovery only records what it would do. "
            "Switch the job or the site to act mode for future decisions to act."
            if mode == "observe"
            else "Approval records your agreement; the controller acts on act-mode Advice with or without it."
        )
        return f"Approved {name}.", cannot
    if action == "veto":
        return (
            f"Vetoed {name}: Recovery will not act on it again.",
            "A veto cannot be undone. To continue the run, resubmit the job.",
        )
    if action == "decide_again":
        return (
            f"Decided again now as {name}, under the mode now: the controller acts on it at its next pass.",
            "The old Advice was decided in observe mode and stays not carried out.",
        )
    if action == "rerun":
        return (
            f"Reconciliation of {name} requested: the controller compares it with Slurm at its next pass.",
            "A re-run cannot change a decision; it only repeats the check (and acts only in act mode).",
        )
    return "", ""


def _int_param(request: Request, name: str) -> int | None:
    """A job or Advice id typed into the filter box (spaces dropped), None when it is not one (the page says so)."""
    try:
        return bounds.parse_optional_int((request.query_params.get(name) or "").strip(), name, maximum=bounds.INT64_MAX)
    except bounds.BoundsError:
        return None


@guarded()
async def advice_list(request: Request) -> Response:
    """Advice, newest first: only active (may still need reconciliation) by default, or all; by job or workflow."""
    dashboard = dashboard_of(request)
    q = request.query_params
    show = "all" if q.get("show") == "all" else "active"
    job_text = (q.get("job") or "").strip()[:20]
    workflow_key = (q.get("workflow") or "").strip()[: bounds.MAX_FILTER_LENGTH]
    problem = ""
    slurm_job_id = _int_param(request, "job")
    if job_text and slurm_job_id is None:
        problem = f"{job_text!r} is not a Slurm job id; showing Advice of every job."
    banner: tuple[str, str] = ("", "")
    async with dashboard.ctx.sessions() as session:
        workflow_id = None
        if workflow_key:
            found = await job_queries.find_workflows_by_key(session, key=workflow_key, limit=1)
            workflow_id = found[0].id if found else -1
            if not found:
                problem = f"No workflow {workflow_key!r} is recorded."
        flt = AdviceFilter(only_active=show == "active", slurm_job_id=slurm_job_id, workflow_id=workflow_id)
        try:
            page = await advice_queries.list_advice(session, filter=flt, page=page_request(request))
        except (CursorError, PageArgumentError):
            page = await advice_queries.list_advice(session, filter=flt, page=PageRequest.build(first=50))
        jobs = await job_queries.jobs_by_ids(session, ids=[a.job_id for a in page.items])
        storm_pauses = await fleet_queries.pauses(session, only_open=True)
        done, done_id = q.get("done") or "", _int_param(request, "advice")
        if done in ACTIONS and done_id is not None:
            current = await advice_queries.get_advice(session, advice_id=done_id)
            job = (
                (await job_queries.jobs_by_ids(session, ids=[current.job_id])).get(current.job_id) if current else None
            )
            mode = effective_mode(job, dashboard.settings).mode if job else None
            banner = result_message(done, current, mode)
    filters = {"show": show, "job": slurm_job_id, "workflow": workflow_key or None}
    return render(
        request,
        "advice.html",
        {
            "page": page,
            "jobs": jobs,
            "show": show,
            "storm_pauses": storm_pauses,
            "filters": filters,
            "problem": problem,
            "banner": banner,
            "self_url": current_url(request),
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
    if action == "veto" and form.get("confirm") != "yes":
        # Irreversible: without JavaScript (no hx-confirm dialog) ask on a page of its own first.
        async with dashboard.ctx.sessions() as session:
            current = await advice_queries.get_advice(session, advice_id=advice_id)
        if current is None:
            return explain(request, title="Unknown Advice", status=404, message=f"no Advice with id {advice_id}")
        return render(
            request,
            "advice_confirm.html",
            {"advice": current, "reason": reason if isinstance(reason, str) else ""},
        )
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
                elif action == "decide_again":
                    fresh = await review.decide_again(
                        session, advice_id=advice_id, user=principal.name, settings=dashboard.settings
                    )
                    advice_id = fresh.id  # the page goes on with the NEW Advice
                    message = "Decided again."
                else:
                    await review.rerun_reconciliation(session, advice_id=advice_id, user=principal.name)
                    message = "Reconciliation requested."
        except review.ReviewError as exc:
            if exc.not_found:
                return explain(request, title="Unknown Advice", status=404, message=str(exc))
            message, failed = str(exc), True
        current = await advice_queries.get_advice(session, advice_id=advice_id)
        jobs = await job_queries.jobs_by_ids(session, ids=[current.job_id] if current else [])
    mode = effective_mode(jobs[current.job_id], dashboard.settings).mode if current and current.job_id in jobs else None
    did, cannot = result_message(action, current, mode) if not failed else (message, "")
    if is_partial_request(request):
        # The row is swapped in place, but the live table's refresh replaces it moments later: the result goes
        # to #action-results outside the live region (dashboard.js), where it stays until dismissed.
        response = render(request, "_advice_row.html", {"advice": current, "jobs": jobs}, status=200)
        result = {"message": did, "cannot": cannot, "failed": failed}
        response.headers["HX-Trigger"] = json.dumps({"recovery:action-result": result})  # ASCII: escapes the rest
        return response
    if failed:
        return explain(
            request,
            title="Action refused",
            status=409,
            message=message,
            links=[("Advice", request.url_for("dashboard:advice").path)],
        )
    return RedirectResponse(
        url_path(request, "dashboard:advice", {"show": "all", "done": action, "advice": advice_id}), status_code=303
    )
