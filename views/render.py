"""Rendering helpers shared by the dashboard's pages: full page or partial, explanations, the Dashboard handle."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from app.domain.admission.mode import effective_mode
from app.infra.context import AppContext
from views.auth import CSRF_FIELD, DashboardAuth, csrf_token


@dataclass
class Dashboard:
    """What every dashboard endpoint needs; put in the ASGI scope by the dashboard mount."""

    ctx: AppContext
    auth: DashboardAuth
    templates: Jinja2Templates
    streams: Any = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def settings(self) -> Any:
        return self.ctx.settings


def dashboard_of(request: Request) -> Dashboard:
    return request.scope["dashboard"]


def is_partial_request(request: Request) -> bool:
    """An htmx request for a fragment (history restores need the whole page)."""
    return bool(request.headers.get("hx-request")) and not request.headers.get("hx-history-restore-request")


def render(
    request: Request, template: str, context: dict[str, Any], *, partial: str | None = None, status: int = 200
) -> Response:
    """The full page, or only `partial` when htmx asks for a fragment (the page includes the same partial)."""
    dashboard = dashboard_of(request)
    name = partial if partial and is_partial_request(request) else template
    principal = getattr(request.state, "principal", None)
    values = {
        "request": request,
        "principal": principal,
        "can_act": bool(principal and principal.can_act),
        "csrf_token": csrf_token(request) if principal else "",
        "csrf_field": CSRF_FIELD,
        "dev_mode": dashboard.settings.dev_no_auth,
        "audit_enabled": dashboard.settings.audit_views_enabled,
        "environment": dashboard.settings.environment,
        "graphiql_url": (dashboard.settings.url_prefix or "") + "/graphql",  # the API explorer (GraphiQL)
        "auth_via": getattr(request.state, "auth_via", ""),
        # A job's mode now, under the operator's current settings (what the advisor and controller use).
        "mode_of": lambda job: effective_mode(job, dashboard.settings) if job is not None else None,
        **context,
    }
    response = dashboard.templates.TemplateResponse(request, name, values, status_code=status)
    response.headers["Vary"] = "HX-Request"
    response.headers["Cache-Control"] = "no-store"
    return response


def explain(
    request: Request,
    *,
    title: str,
    message: str,
    status: int,
    hint: str | None = None,
    links: list[tuple[str, str]] | None = None,
) -> Response:
    """A page that says what went wrong and what to do (unknown ids, disabled views, failed logins)."""
    return render(
        request, "message.html", {"title": title, "message": message, "hint": hint, "links": links or []}, status=status
    )
