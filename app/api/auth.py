"""Authentication glue of the API: how HTTP and WebSocket callers present tokens (the authenticator is the
process's)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.auth import Authenticator, AuthError, Principal, authenticate_request


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
