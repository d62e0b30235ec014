"""Routes of the dashboard."""

from __future__ import annotations

from starlette.routing import BaseRoute

from app.context import AppContext


def dashboard_routes(ctx: AppContext) -> list[BaseRoute]:
    """The dashboard's pages, fragments and live-update streams."""
    return []
