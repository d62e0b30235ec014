"""/dashboard/auth/login, /callback and /logout: OIDC authorization code + PKCE via authlib's Starlette client."""

from __future__ import annotations

import datetime as dt
import logging
import secrets
import time

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from app.auth import AuthError
from app.sessions import service as session_service
from views.auth import SESSION_MAX_AGE, csrf_valid, safe_next
from views.render import dashboard_of, explain

log = logging.getLogger("recovery.dashboard")
NEXT_KEY = "login_next"


async def login(request: Request) -> Response:
    """Send the browser to the issuer (state, nonce and PKCE verifier are kept in the session cookie)."""
    dashboard = dashboard_of(request)
    home = request.url_for("dashboard:workflows").path
    if dashboard.auth.dev_mode:
        return RedirectResponse(home, status_code=303)
    if not dashboard.auth.login_configured:
        return explain(
            request,
            title="Login is not configured",
            status=503,
            message="The dashboard needs RECOVERY_OIDC_ISSUER and RECOVERY_OIDC_CLIENT_ID to sign you in.",
            hint="Scripts can still call dashboard pages with an Authorization: Bearer header.",
        )
    request.session[NEXT_KEY] = safe_next(request.query_params.get("next")) or home
    client = dashboard.auth.oauth_client()
    try:
        return await client.authorize_redirect(request, str(request.url_for("dashboard:callback")))
    except Exception as exc:  # the issuer is down or its metadata is broken: say so, do not 500
        log.warning("cannot start login at %s: %s", dashboard.settings.oidc_issuer, exc)
        return explain(
            request,
            title="Cannot reach the identity provider",
            status=503,
            message=f"Starting the login at {dashboard.settings.oidc_issuer} failed: {type(exc).__name__}: {exc}"[:500],
        )


async def callback(request: Request) -> Response:
    """Exchange the code (with the PKCE verifier), verify the ACCESS token, keep only what the session needs."""
    dashboard = dashboard_of(request)
    if not dashboard.auth.login_configured:
        return explain(request, title="Login is not configured", status=503, message="No OIDC client is configured.")
    if request.query_params.get("error"):
        return explain(
            request,
            title="Login failed",
            status=400,
            message=f"The identity provider answered: {request.query_params.get('error')}: "
            f"{request.query_params.get('error_description', '')}"[:500],
            links=[("Try again", request.url_for("dashboard:login").path)],
        )
    client = dashboard.auth.oauth_client()
    try:
        token = await client.authorize_access_token(request)
    except Exception as exc:  # a stale or forged state, a reused code, an unreachable issuer
        return explain(
            request,
            title="Login failed",
            status=400,
            message=f"The login could not be completed: {getattr(exc, 'description', None) or exc}"[:500],
            links=[("Try again", request.url_for("dashboard:login").path)],
        )
    try:
        principal = await dashboard.auth.verifier().verify(token.get("access_token", ""))
    except AuthError as exc:
        return explain(
            request,
            title="Not allowed",
            status=exc.status if exc.status in (401, 403) else 403,
            message=f"Your access token was refused: {exc.message}",
            hint="You need the viewer or operator role for the Recovery dashboard; ask the operator.",
        )
    expires = float(token.get("expires_at") or time.time() + 3600)
    destination = request.session.pop(NEXT_KEY, None) or request.url_for("dashboard:workflows").path
    request.session.clear()  # drop the login state; start a fresh session (and a fresh CSRF token)
    request.session["user"] = {
        "sub": principal.subject,
        "name": principal.name,
        "roles": sorted(principal.roles),
        "exp": min(expires, time.time() + 8 * 3600),
    }
    request.session["csrf"] = secrets.token_urlsafe(32)
    request.session["sid"] = secrets.token_urlsafe(24)  # revoked on the server at sign-out
    log.info("dashboard login: %s (%s) roles %s", principal.name, principal.subject, sorted(principal.roles))
    return RedirectResponse(safe_next(destination) or request.url_for("dashboard:workflows").path, status_code=303)


async def logout(request: Request) -> Response:
    """POST with the CSRF token: end the session on the server (a copy of the cookie stops working) and forget it.

    The identity provider's own session is left alone.
    """
    dashboard = dashboard_of(request)
    if not await csrf_valid(request):
        return explain(
            request,
            title="Sign-out refused",
            status=403,
            message="Signing out needs this session's CSRF token: use the Sign out button of a dashboard page.",
            links=[("Workflows Overview", request.url_for("dashboard:workflows").path)],
        )
    user, sid = request.session.get("user"), request.session.get("sid")
    if isinstance(user, dict) and isinstance(sid, str) and sid:
        expires = dt.datetime.fromtimestamp(min(float(user.get("exp", 0)), time.time() + SESSION_MAX_AGE), tz=dt.UTC)
        async with dashboard.ctx.sessions() as session, session.begin():
            await session_service.revoke_session(
                session, session_id=sid, subject=str(user.get("sub", "")), expires_at=expires
            )
        log.info("dashboard sign-out: %s (%s)", user.get("name"), user.get("sub"))
    request.session.clear()
    return explain(
        request,
        title="Signed out",
        status=200,
        message="You are signed out of the Recovery dashboard.",
        links=[("Sign in again", request.url_for("dashboard:login").path)],
    )
