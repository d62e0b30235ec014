"""Authentication: OIDC bearer tokens to Principals with viewer/operator roles, and the loopback-only dev mode."""

from __future__ import annotations

import httpx

from app.auth.bearer import Authenticator, authenticate_request, authorization_of, bearer_token
from app.auth.dev import DevModeRefused, DevVerifier, check_dev_mode, is_loopback_host
from app.auth.principal import (
    DEV_PRINCIPAL,
    KNOWN_ROLES,
    OPERATOR,
    VIEWER,
    AuthError,
    Principal,
    effective_roles,
)
from app.auth.tokens import TokenVerifier, allowed_algorithms
from app.infra.config import Settings, SettingsError


class NotConfigured:
    """Stands in when neither OIDC nor dev mode is configured: every request is refused (the CLI refuses to start)."""

    requires_token = True

    async def verify(self, token: str) -> Principal:
        raise AuthError(503, "authentication is not configured: set RECOVERY_OIDC_ISSUER (or dev mode on loopback)")


def build_authenticator(settings: Settings) -> TokenVerifier | DevVerifier:
    """The authenticator the service should use: DevVerifier in (loopback-only) dev mode, else TokenVerifier."""
    if settings.dev_no_auth:
        return DevVerifier(settings)  # refuses a non-loopback bind, warns loudly otherwise
    return TokenVerifier(settings)


def process_authenticator(settings: Settings) -> Authenticator:
    """The one authenticator (and JWKS cache) of a process, shared by the API and the dashboard.

    JWKS fetches are rare (the keys are cached) and the process may end without a shutdown hook,
    so its HTTP client keeps no idle connections that would outlive the app.
    """
    if settings.dev_no_auth:
        return DevVerifier(settings)
    if not settings.oidc_issuer:
        return NotConfigured()
    http = httpx.AsyncClient(
        timeout=httpx.Timeout(10.0), follow_redirects=False, limits=httpx.Limits(max_keepalive_connections=0)
    )
    return TokenVerifier(settings, http=http)


def check_auth_configuration(settings: Settings) -> None:
    """Refuse to serve without auth unless dev mode is explicit and bound to loopback."""
    if check_dev_mode(settings):  # raises unless bound to loopback; warns loudly when on
        return
    if not settings.oidc_issuer:
        raise SettingsError(
            "no authentication configured: set RECOVERY_OIDC_ISSUER (and RECOVERY_OIDC_AUDIENCE), "
            "or for local development only RECOVERY_DEV_NO_AUTH=true with a loopback RECOVERY_BIND"
        )


__all__ = [
    "DEV_PRINCIPAL",
    "KNOWN_ROLES",
    "NotConfigured",
    "OPERATOR",
    "VIEWER",
    "AuthError",
    "Authenticator",
    "DevModeRefused",
    "DevVerifier",
    "Principal",
    "TokenVerifier",
    "allowed_algorithms",
    "authenticate_request",
    "authorization_of",
    "bearer_token",
    "build_authenticator",
    "check_auth_configuration",
    "check_dev_mode",
    "effective_roles",
    "is_loopback_host",
    "process_authenticator",
]
