"""Builds the worker's services from settings: the one place that knows which loops exist."""

from __future__ import annotations

from app.context import AppContext
from app.slurm.adapter import Scheduler
from app.slurm.cli_scheduler import CliScheduler
from worker.observer import Observer
from worker.service import Service


def build_services(ctx: AppContext, *, scheduler: Scheduler | None = None) -> list[Service]:
    """Every background service of the worker, in start order."""
    scheduler = scheduler or CliScheduler(ctx.settings)
    observer = Observer(ctx, scheduler)
    services: list[Service] = [observer]
    return services
