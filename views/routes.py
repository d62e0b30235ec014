"""Routes of the dashboard: pages, partials, live streams and login under /dashboard; vendored assets under /static."""

from __future__ import annotations

from typing import Any

from starlette.middleware import Middleware
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from app.infra.context import AppContext
from views import (
    advice_page,
    audit_page,
    ended,
    find,
    fleet_page,
    glossary_page,
    goodput,
    home_page,
    live,
    log_page,
    login,
    not_enrolled_page,
    pages,
)
from views.auth import DashboardAuth, DashboardSessions, session_secret
from views.render import Dashboard
from views.static_files import CompressedStaticFiles
from views.templating import STATIC_DIR, build_templates


class _WithDashboard:
    """Puts the Dashboard handle into the scope of every request under the mount."""

    def __init__(self, app: ASGIApp, *, dashboard: Dashboard) -> None:
        self.app = app
        self.dashboard = dashboard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["dashboard"] = self.dashboard
        await self.app(scope, receive, send)


def _templates() -> Any:
    templates = build_templates()
    templates.env.globals["advice_actions"] = advice_page.actions_for  # only the actions that apply
    templates.env.globals["why_ended"] = ended.why_ended
    return templates


def dashboard_routes(ctx: AppContext) -> list[BaseRoute]:
    """The dashboard's pages, fragments and live-update streams."""
    settings = ctx.settings
    dashboard = Dashboard(
        ctx=ctx,
        auth=DashboardAuth(settings, ctx.authenticator),
        templates=_templates(),
        streams=live.StreamLimiter(settings.live_streams_per_principal),
    )
    routes = [
        Route("/", home_page.home, name="home"),
        Route("/workflow", pages.workflows, name="workflows"),
        Route("/go", find.go, name="go"),
        Route("/workflow/{key:path}", pages.workflow, name="workflow"),
        Route("/jobs", pages.find_job, name="find_job"),
        Route("/jobs/{job_id:int}", pages.job, name="job"),
        Route("/jobs/{job_id:int}/attempts/{attempt_index:int}", pages.attempt_details, name="attempt"),
        Route("/jobs/{job_id:int}/attempts/{attempt_index:int}/timeline", pages.timeline, name="timeline"),
        Route("/jobs/{ref}", pages.find_job, name="job_by_scheduler_id"),
        Route("/attempts/{uuid}", pages.attempt_details, name="attempt_by_uuid"),
        Route("/attempts/{uuid}/timeline", pages.timeline, name="timeline_by_uuid"),
        Route("/audit", audit_page.audit_events, name="audit"),
        Route("/advice", advice_page.advice_list, name="advice"),
        Route("/goodput", goodput.cluster_goodput, name="goodput"),
        Route("/advice/{advice_id:int}/{action}", advice_page.advice_action, methods=["POST"], name="advice_action"),
        Route("/nodes", fleet_page.nodes, name="nodes"),
        Route("/fleet/{action}", fleet_page.fleet_action, methods=["POST"], name="fleet_action"),
        Route("/live", live.live, name="live"),
        Route("/glossary", glossary_page.glossary_page, name="glossary"),
        Route("/not-enrolled", not_enrolled_page.not_enrolled, name="not_enrolled"),
        Route("/jobs/{job_id:int}/attempts/{attempt_index:int}/log", log_page.log_view, name="attempt_log"),
        Route("/auth/login", login.login, name="login"),
        Route("/auth/callback", login.callback, name="callback"),
        Route("/auth/logout", login.logout, methods=["POST"], name="logout"),
    ]
    cookie_path = (settings.url_prefix or "") + "/dashboard"
    middleware = [
        Middleware(_WithDashboard, dashboard=dashboard),
        Middleware(DashboardSessions, secret=session_secret(settings), path=cookie_path),
    ]
    return [
        Mount("/dashboard", routes=routes, middleware=middleware, name="dashboard"),
        Mount("/static", app=CompressedStaticFiles(directory=str(STATIC_DIR)), name="static"),
    ]
