"""Who is looking at the dashboard: OIDC login (code + PKCE), the signed session cookie, bearer tokens and CSRF."""

from __future__ import annotations

import functools
import hmac
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from app.auth import (
    DEV_PRINCIPAL,
    OPERATOR,
    VIEWER,
    AuthError,
    Principal,
    authenticate_request,
    effective_roles,
)
from app.domain.control.identity import MAX_ATTEMPT_INDEX, MAX_SLURM_JOB_ID
from app.domain.edge import bounds
from app.infra.config import Settings
from app.infra.log_masking import SECRET_PARAMETERS
from app.sessions import queries as session_queries
from views.urls import current_url

log = logging.getLogger("recovery.dashboard")

SESSION_COOKIE = "recovery_dashboard"
SESSION_MAX_AGE = 8 * 3600
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"
OAUTH_CLIENT = "recovery"
LOGIN_SCOPE = "openid profile email roles"

Endpoint = Callable[[Request], Awaitable[Response]]


class DashboardSessions:
    """SessionMiddleware for the dashboard mount whose cookie is `Secure` exactly when the request is https."""

    def __init__(self, app: ASGIApp, *, secret: str, path: str) -> None:
        common: dict[str, Any] = dict(
            secret_key=secret, session_cookie=SESSION_COOKIE, max_age=SESSION_MAX_AGE, path=path or "/", same_site="lax"
        )
        self.plain = SessionMiddleware(app, https_only=False, **common)
        self.secure = SessionMiddleware(app, https_only=True, **common)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        secure = scope.get("scheme") in {"https", "wss"}
        await (self.secure if secure else self.plain)(scope, receive, send)


def session_secret(settings: Settings) -> str:
    """The configured secret, or a random one (sessions then end when the process restarts)."""
    return settings.session_secret or secrets.token_urlsafe(32)


class DashboardAuth:
    """Resolves the caller of a dashboard request and runs the login flow; one per app."""

    def __init__(self, settings: Settings, verifier: Callable[[], Any]) -> None:
        self.settings = settings
        self._verifier = verifier  # the process's authenticator (AppContext.authenticator), shared with the API
        self._oauth: Any = None

    @property
    def dev_mode(self) -> bool:
        return self.settings.dev_no_auth

    @property
    def login_configured(self) -> bool:
        return bool(self.settings.oidc_issuer and self.settings.oidc_client_id)

    def verifier(self) -> Any:
        """The process's TokenVerifier (or DevVerifier); unconfigured, a refusal that answers 503 when used."""
        return self._verifier()

    def oauth_client(self) -> Any:
        """authlib's Starlette OAuth client for the dashboard's public (PKCE) or confidential client."""
        if self._oauth is None:
            from authlib.integrations.starlette_client import OAuth

            oauth = OAuth()
            oauth.register(
                OAUTH_CLIENT,
                client_id=self.settings.oidc_client_id,
                client_secret=self.settings.oidc_client_secret or None,
                server_metadata_url=self.settings.oidc_issuer.rstrip("/") + "/.well-known/openid-configuration",
                client_kwargs={
                    "scope": LOGIN_SCOPE,
                    "code_challenge_method": "S256",
                    "token_endpoint_auth_method": "client_secret_basic" if self.settings.oidc_client_secret else "none",
                },
            )
            self._oauth = oauth
        return self._oauth.create_client(OAUTH_CLIENT)

    async def principal(self, request: Request) -> tuple[Principal | None, str]:
        """(principal, how): how is `dev`, `bearer` or `session`; (None, "") for an anonymous caller."""
        if self.dev_mode:
            return DEV_PRINCIPAL, "dev"
        if request.headers.get("authorization"):
            return await authenticate_request(request, self.verifier()), "bearer"
        user = request.session.get("user")
        if isinstance(user, dict) and float(user.get("exp", 0)) > time.time():
            sid = request.session.get("sid")
            if not isinstance(sid, str) or not sid or await self._revoked(request, sid):
                request.session.clear()  # signed out (perhaps in another copy of this cookie): log in again
                return None, ""
            return Principal(
                subject=user["sub"],
                name=user.get("name") or user["sub"],
                email=None,
                roles=effective_roles(user.get("roles", [])),
            ), "session"
        if user is not None:
            request.session.pop("user", None)  # expired: log in again
        return None, ""

    async def _revoked(self, request: Request, sid: str) -> bool:
        async with request.scope["dashboard"].ctx.sessions() as session:
            return await session_queries.is_revoked(session, session_id=sid)


def csrf_token(request: Request) -> str:
    """The session's CSRF token (created on first use)."""
    token = request.session.get("csrf")
    if not isinstance(token, str) or len(token) < 20:
        token = secrets.token_urlsafe(32)
        request.session["csrf"] = token
    return token


async def csrf_valid(request: Request) -> bool:
    """True when the POST carries the session's token in the X-CSRF-Token header or the csrf_token field."""
    expected = request.session.get("csrf")
    if not isinstance(expected, str) or not expected:
        return False
    given = request.headers.get(CSRF_HEADER)
    if not given:
        form = await request.form()
        value = form.get(CSRF_FIELD)
        given = value if isinstance(value, str) else None
    return given is not None and bool(given) and hmac.compare_digest(given.encode(), expected.encode())


def wants_html_redirect(request: Request) -> bool:
    """A plain browser navigation (not htmx, not an event stream, not a POST) may be sent to the login page."""
    if request.method != "GET" or request.headers.get("hx-request"):
        return False
    return "text/event-stream" not in request.headers.get("accept", "")


def safe_next(value: str | None) -> str | None:
    """Only local absolute paths may be a post-login destination (no open redirects)."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return None
    parts = urlsplit(value)
    return None if parts.scheme or parts.netloc else value


def guarded(role: str = VIEWER) -> Callable[[Endpoint], Endpoint]:
    """Endpoint decorator: authenticate (redirect to login or 401), require `role`, check CSRF on unsafe methods."""

    def decorate(endpoint: Endpoint) -> Endpoint:
        @functools.wraps(endpoint)
        async def wrapper(request: Request) -> Response:
            auth: DashboardAuth = request.scope["dashboard"].auth
            try:
                principal, how = await auth.principal(request)
            except AuthError as exc:
                return PlainTextResponse(
                    exc.message,
                    status_code=exc.status,
                    headers={"WWW-Authenticate": exc.www_authenticate} if exc.status == 401 else None,
                )
            if principal is None:
                if wants_html_redirect(request):
                    path = current_url(request, with_query=False)  # an id in the path stays the same id
                    target = path + (f"?{_public_query(request)}" if request.url.query else "")
                    login = request.url_for("dashboard:login").path
                    return RedirectResponse(f"{login}?next={_quote(target)}", status_code=303)
                return PlainTextResponse(
                    "login required: sign in at the dashboard or send Authorization: Bearer <token>",
                    status_code=401,
                    headers={"WWW-Authenticate": 'Bearer realm="recovery"'},
                )
            if role == OPERATOR and not principal.can_act:
                return PlainTextResponse(
                    f"{principal.name} lacks the operator role needed for this action", status_code=403
                )
            if not principal.can_read:
                return PlainTextResponse(
                    f"{principal.name} has neither the viewer nor the operator role", status_code=403
                )
            problem = _path_problem(request)
            if problem is not None:
                return PlainTextResponse(problem, status_code=400)
            request.state.principal = principal
            request.state.auth_via = how
            csrf_token(request)
            if request.method not in {"GET", "HEAD", "OPTIONS"} and how != "bearer" and not await csrf_valid(request):
                # A bearer token cannot be attached by another site; a cookie (or dev mode) can, so those need the
                # token.
                return PlainTextResponse("missing or wrong CSRF token: reload the page and try again", status_code=403)
            try:
                return await endpoint(request)
            except bounds.BoundsError as exc:  # a number or text from the request out of bounds (views/inputs.py)
                return PlainTextResponse(f"{exc}", status_code=400)

        return wrapper

    return decorate


# Path ids are checked against what their columns hold (Starlette's :int converter takes any number of digits).
PATH_ID_LIMITS = {"job_id": (1, MAX_SLURM_JOB_ID), "attempt_index": (0, MAX_ATTEMPT_INDEX)}


def _path_problem(request: Request) -> str | None:
    """Why a numeric path parameter cannot name anything (out of its column's range), else None."""
    for name, value in request.path_params.items():
        if isinstance(value, int):
            low, high = PATH_ID_LIMITS.get(name, (0, bounds.INT64_MAX))
            try:
                bounds.check_int(value, name, minimum=low, maximum=high)
            except bounds.BoundsError as exc:
                return f"{exc}: no such record can exist"
    return None


def _public_query(request: Request) -> str:
    """The query string without secret parameters (a token in a URL must not travel on in a redirect)."""
    from urllib.parse import urlencode

    return urlencode([(k, v) for k, v in request.query_params.multi_items() if k.lower() not in SECRET_PARAMETERS])


def _quote(value: str) -> str:
    from urllib.parse import quote

    return quote(value, safe="")
