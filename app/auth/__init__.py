"""Authentication: OIDC bearer tokens to Principals with viewer/operator roles, and the loopback-only dev mode."""

from __future__ import annotations

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
from app.config import Settings


def build_authenticator(settings: Settings) -> TokenVerifier | DevVerifier:
    """The authenticator the service should use: DevVerifier in (loopback-only) dev mode, else TokenVerifier."""
    if settings.dev_no_auth:
        return DevVerifier(settings)  # refuses a non-loopback bind, warns loudly otherwise
    return TokenVerifier(settings)


__all__ = [
    "DEV_PRINCIPAL",
    "KNOWN_ROLES",
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
    "check_dev_mode",
    "effective_roles",
    "is_loopback_host",
]
