"""Routes of the API: /graphql (HTTP and WebSocket) and the /v1 REST compatibility endpoints."""

from __future__ import annotations

from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute

from app.api.graphql_app import RecoveryGraphQL
from app.api.push import push_routes
from app.api.rest import rest_routes
from app.infra.context import AppContext


def api_routes(ctx: AppContext) -> list[BaseRoute]:
    """The API's routes (GraphQL over HTTP and WebSocket, REST compatibility), all behind bearer authentication."""
    authenticator = ctx.authenticator()  # the process's one, shared with the dashboard
    graphql_app = RecoveryGraphQL(ctx, authenticator)
    return [
        Route("/graphql", graphql_app, methods=["GET", "POST"]),
        WebSocketRoute("/graphql", graphql_app),
        *push_routes(ctx, authenticator),  # before /v1's mount: POST /v1/logs is OTLP's path
        Mount("/v1", routes=rest_routes(ctx, authenticator)),
    ]
