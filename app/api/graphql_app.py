"""GraphQL over HTTP and WebSocket (graphql-transport-ws) with bearer authentication on both."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any, cast

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL
from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import BaseGraphQLTransportWSHandler

from app.api.auth import authenticate_connection
from app.api.context import ApiContext
from app.api.errors import FORBIDDEN, LIMIT_EXCEEDED, UNAUTHENTICATED
from app.api.graphiql import graphiql_html
from app.api.jsonbody import graphql_json
from app.api.limits import MAX_SUBSCRIPTIONS_PER_CONNECTION
from app.api.loaders import Loaders
from app.api.masking import masked
from app.api.schema import schema
from app.auth import Authenticator, AuthError, authenticate_request
from app.infra.context import AppContext
from app.infra.http_guards import parsed_body


def auth_error_body(exc: AuthError) -> dict[str, Any]:
    code = FORBIDDEN if exc.status == 403 else UNAUTHENTICATED if exc.status == 401 else "UNAVAILABLE"
    return {"errors": [{"message": exc.message, "extensions": {"code": code}}]}


class AuthenticatingWSHandler(BaseGraphQLTransportWSHandler[ApiContext, None]):
    """graphql-transport-ws with authentication at connection_init and a clear per-connection operation bound."""

    async def handle_connection_init(self, message: Any) -> None:
        payload = message.get("payload") or {}
        if isinstance(payload, dict) and not self.connection_init_received and not self.connection_timed_out:
            try:
                headers = cast(Any, self.websocket).ws.headers  # the Starlette WebSocket behind strawberry's adapter
                principal = await authenticate_connection(
                    payload, headers, cast(RecoveryGraphQL, self.view).authenticator
                )
            except AuthError as exc:
                if self.connection_init_timeout_task:
                    self.connection_init_timeout_task.cancel()
                self.connection_init_received = True
                # graphql-ws: 4401 Unauthorized, 4403 Forbidden; a close reason is at most 123 bytes.
                code = 4403 if exc.status == 403 else 4401
                await self.websocket.close(code=code, reason=exc.message.encode()[:120].decode(errors="ignore"))
                return
            context: Any = self.context  # the ApiContext this view's get_context built
            context.principal = principal
        await super().handle_connection_init(message)

    async def handle(self) -> None:
        try:
            await super().handle()
        except RecursionError:  # a message nested too deeply for the JSON parser
            await self.handle_invalid_message("WebSocket message nests too deeply")

    async def handle_message(self, message: Any) -> None:
        if not isinstance(message, dict):
            await self.handle_invalid_message("WebSocket message must be a JSON object")
            return
        await super().handle_message(cast(Any, message))

    async def _send_result_stream(self, operation: Any, result_source: Any) -> None:
        # Subscription results do not pass the MaskErrors extension: mask each one before it is sent.
        async def masked_results() -> AsyncGenerator[Any, None]:
            async for result in result_source:
                errors = getattr(result, "errors", None)
                if errors:
                    errors[:] = [masked(error) for error in errors]
                yield result

        await super()._send_result_stream(operation, masked_results())

    async def handle_subscribe(self, message: Any) -> None:
        if (
            self.connection_acknowledged
            and message.get("id") not in self.operations
            and len(self.operations) >= MAX_SUBSCRIPTIONS_PER_CONNECTION
        ):
            await self.send_message(
                {
                    "id": message["id"],
                    "type": "error",
                    "payload": [
                        {
                            "message": f"subscription limit reached: at most "
                            f"{MAX_SUBSCRIPTIONS_PER_CONNECTION} operations per "
                            "connection; complete one or open another connection",
                            "extensions": {"code": LIMIT_EXCEEDED, "limit": "subscriptionsPerConnection"},
                        }
                    ],
                }
            )
            return
        await super().handle_subscribe(message)


class RecoveryGraphQL(GraphQL[ApiContext, None]):
    """Strawberry's ASGI app: HTTP requests authenticated before GraphQL sees them, WebSockets at connection_init."""

    graphql_transport_ws_handler_class = AuthenticatingWSHandler

    def __init__(self, ctx: AppContext, authenticator: Authenticator) -> None:
        super().__init__(
            schema,
            graphql_ide="graphiql",
            subscription_protocols=(GRAPHQL_TRANSPORT_WS_PROTOCOL,),
            max_subscriptions_per_connection=None,  # enforced with a clearer error by AuthenticatingWSHandler
            keep_alive=True,
            keep_alive_interval=15,
        )
        self.ctx = ctx
        self.authenticator = authenticator

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            try:
                principal = await authenticate_request(Request(scope, receive), self.authenticator)
            except AuthError as exc:
                headers = {"WWW-Authenticate": exc.www_authenticate} if exc.status in (401, 403) else {}
                await JSONResponse(auth_error_body(exc), status_code=exc.status, headers=headers)(scope, receive, send)
                return
            scope.setdefault("state", {})["principal"] = principal
        await super().__call__(scope, receive, send)

    async def get_context(self, request: Request | WebSocket, response: Response | WebSocket) -> ApiContext:
        websocket = request.scope["type"] == "websocket"
        return ApiContext(
            app=self.ctx,
            # A WebSocket context lives as long as the connection: never serve it cached rows.
            loaders=Loaders(self.ctx.sessions, cache=not websocket),
            principal=None if websocket else request.scope.get("state", {}).get("principal"),
            request=request,
            response=response,
            websocket=websocket,
        )

    def decode_json(self, data: str | bytes) -> object:
        # The edge guard (app/infra/http_guards.py) has parsed a JSON body already, with the same json module.
        parsed = parsed_body(data) if isinstance(data, bytes) else None
        return parsed if parsed is not None else super().decode_json(data)

    def encode_json(self, data: object) -> str | bytes:
        return graphql_json(data)

    async def render_graphql_ide(self, request: Request) -> Response:
        # Vendored assets under the dashboard's CSP (app/main.py), so GraphiQL works without internet access.
        return graphiql_html(request)
