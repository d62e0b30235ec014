"""Routes of the API: /graphql and /v1."""

from __future__ import annotations

from starlette.routing import BaseRoute

from app.context import AppContext


def api_routes(ctx: AppContext) -> list[BaseRoute]:
    """The API's routes (GraphQL over HTTP and WebSocket, REST compatibility)."""
    return []
