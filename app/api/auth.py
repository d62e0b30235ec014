"""Authentication glue of the API: which authenticator serves, and how HTTP and WebSocket callers present tokens."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.auth import Authenticator, AuthError, Principal, authenticate_request, build_authenticator
from app.config import Settings


class NotConfigured:
    """Stands in when neither OIDC nor dev mode is configured: every request is refused (the CLI refuses to start)."""

    requires_token = True

    async def verify(self, token: str) -> Principal:
        raise AuthError(503, "authentication is not configured: set RECOVERY_OIDC_ISSUER (or dev mode on loopback)")


def api_authenticator(settings: Settings) -> Authenticator:
    """The authenticator of the API: TokenVerifier, the loopback-only DevVerifier, or a refusal."""
    if not settings.dev_no_auth and not settings.oidc_issuer:
        return NotConfigured()
    return build_authenticator(settings)


async def authenticate_connection(
    payload: Mapping[str, Any], handshake_headers: Any, authenticator: Authenticator
) -> Principal:
    """The caller of a graphql-transport-ws connection: connection_init payload {"Authorization": "Bearer …"} or
    {"token": "…"}, else the Authorization header of the WebSocket handshake."""
    token = payload.get("token")
    if token is not None:
        if not isinstance(token, str):
            raise AuthError(401, "connection_init payload 'token' must be a string")
        return await authenticate_request({"authorization": f"Bearer {token}"}, authenticator)
    if any(isinstance(key, str) and key.lower() == "authorization" for key in payload):
        return await authenticate_request(payload, authenticator)
    return await authenticate_request(handshake_headers, authenticator)
