"""create_app(settings) -> the Starlette application with health checks, API, dashboard and static files."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy import text
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import __version__
from app.api.routes import api_routes
from app.infra.asgi import HttpMiddleware
from app.infra.config import Settings
from app.infra.context import AppContext
from app.infra.errors import database_error_text, database_problem, outage_response
from app.infra.http_guards import EdgeGuard
from app.infra.metrics import RequestMetrics
from app.infra.migrate import current_revision, head_revision
from views.find import not_found as not_found_page
from views.routes import dashboard_routes

log = logging.getLogger("recovery.http")

SECURITY_HEADERS = [
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self' data:; "
        b"connect-src 'self'; frame-ancestors 'none'; base-uri 'self'; form-action 'self'",
    ),
]


class SecurityHeaders(HttpMiddleware):
    """Adds CSP (no inline script), frame denial and friends to every HTTP response."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                extra = [(k, v) for k, v in SECURITY_HEADERS if k not in present]
                message["headers"] = list(message.get("headers", [])) + extra
            await send(message)

        await self.app(scope, receive, send_with_headers)


class DatabaseOutages(HttpMiddleware):
    """Answers 503 with a clear JSON (REST, GraphQL) or HTML (dashboard) error while the database is away.

    Any request whose handler failed because the database is unreachable, busy past the busy timeout
    or out of disk gets a machine-readable code (`DATABASE_UNAVAILABLE`, `DATABASE_BUSY`,
    `STORAGE_FULL`) and `Retry-After`, never a 500 or the driver's text. Other exceptions pass on.
    """

    def __init__(self, app: ASGIApp, *, prefix: str = "") -> None:
        super().__init__(app)
        self.prefix = prefix

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False
        # Taken before routing: Mount rewrites root_path in this same scope on the way in.
        prefix = (scope.get("root_path", "") or "") + self.prefix
        path = str(scope.get("path", ""))
        path = path[len(prefix) :] if prefix and path.startswith(prefix) else path

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            problem = database_problem(exc)
            if problem is None:
                raise
            log.warning("%s %s: %s", scope.get("method"), scope.get("path"), database_error_text(exc))
            if started:
                return  # a stream already under way just ends; the client reconnects from its position
            await outage_response(problem, path)(scope, receive, send)


async def healthz(request: Request) -> JSONResponse:
    """Liveness: the process answers."""
    return JSONResponse({"status": "ok", "version": __version__})


async def readyz(request: Request) -> JSONResponse:
    """Readiness: the database answers and is migrated to this code's head revision."""
    ctx: AppContext = request.app.state.ctx
    try:
        async with ctx.engine.connect() as conn:
            await asyncio.wait_for(conn.execute(text("SELECT 1")), timeout=5)
        revision = await current_revision(ctx.engine)
    except Exception as exc:  # the database went away: say so (our code, not the driver's text), keep serving
        problem = database_problem(exc)
        return JSONResponse(
            {"status": "unavailable", "database": problem.message if problem else type(exc).__name__},
            status_code=503,
        )
    head = head_revision()
    if revision != head:
        return JSONResponse(
            {
                "status": "unavailable",
                "database": f"at revision {revision}, code expects {head}: run `recovery db upgrade`",
            },
            status_code=503,
        )
    return JSONResponse({"status": "ready", "revision": revision})


def _feature_routes(ctx: AppContext) -> list[BaseRoute]:
    """Routes of the API and dashboard, each contributed by its own package."""
    return [*api_routes(ctx), *dashboard_routes(ctx)]


def create_app(settings: Settings, *, ctx: AppContext | None = None, background: Any = None) -> Starlette:
    """Build the ASGI app; `background` is an optional awaitable factory run for the app's lifetime."""
    ctx = ctx or AppContext.open(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        task = asyncio.create_task(background(), name="background") if background else None
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            await ctx.close()

    inner: list[BaseRoute] = [
        Route("/healthz", healthz),
        Route("/readyz", readyz),
        *_feature_routes(ctx),
    ]
    routes: list[BaseRoute] = inner
    if settings.url_prefix:
        routes = [Route("/healthz", healthz), Mount(settings.url_prefix, routes=inner)]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={404: not_found_page})
    app.state.ctx = ctx
    app.state.settings = settings
    # Added innermost first: RequestMetrics > SecurityHeaders > EdgeGuard > DatabaseOutages > routes, so the
    # guard's refusals get the security headers and an outage answer is still behind the guard.
    app.add_middleware(DatabaseOutages, prefix=settings.url_prefix or "")
    app.add_middleware(EdgeGuard, dev_mode=settings.dev_no_auth, allowed_hosts=frozenset({settings.bind_host.lower()}))
    app.add_middleware(SecurityHeaders)
    app.add_middleware(RequestMetrics, prefix=settings.url_prefix)
    return app
