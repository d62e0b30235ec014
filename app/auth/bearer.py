"""Finds the bearer token of an HTTP request, WebSocket or connection_init payload and authenticates it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Protocol

from app.auth.principal import AuthError, Principal

# RFC 6750 §2.1 b64token
_B64TOKEN = re.compile(r"^[A-Za-z0-9\-._~+/]+=*$")


class Authenticator(Protocol):
    """TokenVerifier, or DevVerifier in dev mode."""

    requires_token: bool

    async def verify(self, token: str) -> Principal: ...


def bearer_token(authorization: str | None) -> str:
    """The token of an `Authorization: Bearer <token>` value (scheme case-insensitive); AuthError(401) otherwise."""
    if authorization is None or not authorization.strip():
        raise AuthError(401, "missing Authorization header (expected 'Bearer <token>')")
    parts = authorization.strip().split()
    if parts[0].lower() != "bearer":
        raise AuthError(401, f"unsupported Authorization scheme {parts[0]!r} (expected 'Bearer <token>')")
    if len(parts) == 1:
        raise AuthError(401, "empty bearer token")
    if len(parts) > 2 or not _B64TOKEN.match(parts[1]):
        raise AuthError(401, "malformed Authorization header (expected 'Bearer <token>')")
    return parts[1]


def authorization_of(source: Any) -> str | None:
    """The Authorization value of a Starlette Request/WebSocket, a Headers object or a plain mapping.

    Mapping keys are matched case-insensitively, so a graphql-ws connection_init payload such as
    {"Authorization": "Bearer ..."} works as well as real headers.
    """
    headers = getattr(source, "headers", source)
    if not isinstance(headers, Mapping) and not hasattr(headers, "get"):
        raise TypeError(f"cannot read headers from {type(source).__name__}")
    value = headers.get("authorization")
    if value is None and isinstance(headers, Mapping):
        value = next((v for k, v in headers.items() if isinstance(k, str) and k.lower() == "authorization"), None)
    if value is not None and not isinstance(value, str):
        raise AuthError(401, "malformed Authorization header (expected a string)")
    return value


async def authenticate_request(request_or_headers: Any, verifier: Authenticator) -> Principal:
    """The Principal behind a request's bearer token; AuthError (401/403/503) when there is none."""
    if not verifier.requires_token:
        return await verifier.verify("")
    return await verifier.verify(bearer_token(authorization_of(request_or_headers)))
