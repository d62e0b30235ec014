"""Builds the worker's services from settings: the one place that knows which loops exist."""

from __future__ import annotations

from app.context import AppContext
from worker.service import Service


def build_services(ctx: AppContext) -> list[Service]:
    """Every background service of the worker, in start order."""
    services: list[Service] = []
    return services
