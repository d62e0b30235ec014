"""The Nodes view (node reputation across jobs) and the operator's fleet actions: release or extend a recovery
budget, confirm a restart storm, clear, pin or unpin a node. Every action is an audit event naming the operator."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from app.auth import OPERATOR
from app.domain.edge import bounds
from app.fleet import queries as fleet_queries
from app.fleet import service as fleet
from app.infra.db import utcnow
from views.auth import guarded
from views.inputs import form_int, form_text, query_text
from views.render import dashboard_of, explain, render

ACTIONS = ("release", "extend", "confirm", "clear", "pin", "unpin")


@guarded()
async def nodes(request: Request) -> Response:
    """Every node hardware/infrastructure evidence blamed, with its jobs, evidence, state and drain; holds; pauses."""
    dashboard = dashboard_of(request)
    cluster = query_text(request, "cluster")
    async with dashboard.ctx.sessions() as session:
        overview = await fleet_queries.node_overview(session, cluster=cluster)
        holds = await fleet_queries.holds(session, cluster=cluster, only_open=True)
        pauses = await fleet_queries.pauses(session, cluster=cluster, only_open=True)
    now = utcnow()
    rows = [(row, fleet.shown_state(row, now), blames) for row, blames in overview]
    settings = dashboard.settings
    return render(
        request,
        "nodes.html",
        {
            "rows": rows,
            "holds": holds,
            "storm_pauses": pauses,
            "cluster": cluster,
            "default_cluster": settings.cluster,
            "rules": {
                "jobs": settings.node_suspect_jobs,
                "window": settings.node_suspect_window,
                "ttl": settings.node_suspect_ttl,
                "drain": settings.node_drain,
                "drain_fraction": settings.node_drain_max_fraction,
                "workflow_budget": settings.budget_workflow_restarts,
                "workflow_window": settings.budget_workflow_window,
                "cluster_budget": settings.budget_cluster_restarts,
                "cluster_window": settings.budget_cluster_window,
                "storm_jobs": settings.storm_jobs,
                "storm_window": settings.storm_window,
            },
        },
    )


@guarded(OPERATOR)
async def fleet_action(request: Request) -> Response:
    """One operator action on budgets, storms or nodes (form post); back to the Nodes view."""
    dashboard = dashboard_of(request)
    action = request.path_params["action"]
    if action not in ACTIONS:
        return explain(
            request,
            title="Unknown action",
            status=404,
            message=f"{action!r} is not a fleet action ({', '.join(ACTIONS)}).",
        )
    user = request.state.principal.name
    form = await request.form()
    # Every field is checked before anything is done: too long or not a number is a 400, never cut to fit.
    note = form_text(form, "note", maximum=bounds.MAX_REASON_LENGTH) or None
    cluster = form_text(form, "cluster") or dashboard.settings.cluster
    back = form_text(form, "next", maximum=500)
    try:
        async with dashboard.ctx.sessions() as session, session.begin():
            if action == "release":
                advice_id = form_int(form, "advice_id")
                await fleet.release_hold(session, advice_id=advice_id, user=user, note=note)
            elif action == "extend":
                extra = form_int(form, "extra", maximum=bounds.INT32_MAX)
                await fleet.extend_budget(
                    session,
                    cluster=cluster,
                    workflow_key=form_text(form, "workflow", maximum=bounds.MAX_KEY_LENGTH) or None,
                    extra=extra,
                    user=user,
                    settings=dashboard.settings,
                    note=note,
                )
            elif action == "confirm":
                await fleet.confirm_storm(session, cluster=cluster, user=user, note=note)
            else:
                await fleet.set_node(
                    session,
                    cluster=cluster,
                    node=form_text(form, "node", maximum=bounds.MAX_NODE_LENGTH),
                    action=action,
                    user=user,
                    note=note,
                )
    except fleet.FleetError as exc:
        return explain(
            request,
            title="Action refused",
            status=404 if exc.not_found else 409,
            message=str(exc),
            links=[("Nodes", request.url_for("dashboard:nodes").path)],
        )
    if not back.startswith(request.url_for("dashboard:home").path.rstrip("/") + "/"):
        back = request.url_for("dashboard:nodes").path
    return RedirectResponse(back, status_code=303)
