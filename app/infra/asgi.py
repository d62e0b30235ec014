"""The base of ASGI middlewares that look at HTTP requests only: lifespan and WebSocket scopes pass through."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send


class HttpMiddleware:
    """Calls `http` for each HTTP request and hands every other scope to the wrapped app untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.http(scope, receive, send)

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one HTTP request (subclasses say how)."""
        raise NotImplementedError
