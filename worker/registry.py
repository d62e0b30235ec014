"""Builds the worker's services from settings: the one place that knows which loops exist."""

from __future__ import annotations

from collections.abc import Sequence

from app.infra.config import Settings
from app.infra.context import AppContext
from app.slurm.adapter import Scheduler
from app.slurm.factory import build_scheduler
from worker.advisor import Advisor
from worker.collector import Collector
from worker.controller import Controller
from worker.drainer import Drainer
from worker.notifier import Notifier
from worker.observer import Observer
from worker.runner import WorkerRunner
from worker.service import Service
from worker.watchdog import Watchdog
from worker.watcher import Watcher


def build_services(ctx: AppContext, *, scheduler: Scheduler | None = None) -> list[Service]:
    """Every background service of the worker, in start order."""
    scheduler = scheduler or build_scheduler(ctx.settings)
    # Changes wake the next stage at once: observer -> advisor -> controller (each also polls).
    controller = Controller(ctx, scheduler)
    advisor = Advisor(ctx, scheduler, on_change=controller.wake)
    # Recorded anomalies wake the advisor; attempt changes make the collector rediscover files
    # and retry log events that wait for their attempt.
    collector = Collector(ctx)
    watcher = Watcher(ctx)
    collector.on_anomaly.append(advisor.wake)
    watcher.on_anomaly.append(advisor.wake)

    def on_observed_change() -> None:
        advisor.wake()
        collector.poke()

    observer = Observer(ctx, scheduler, on_change=on_observed_change)
    services: list[Service] = [observer, collector, watcher, advisor, controller, Notifier(ctx)]
    if ctx.settings.watchdog_process == "embedded":
        services.append(Watchdog(ctx, scheduler))
    if ctx.settings.node_drain != "off":
        services.append(Drainer(ctx, scheduler))
    return services


def build_watchdog(ctx: AppContext, *, scheduler: Scheduler | None = None) -> list[Service]:
    """The watchdog alone, for `recovery watchdog` (its own process and lease, so a dead worker fails open)."""
    return [Watchdog(ctx, scheduler or build_scheduler(ctx.settings))]


def cluster_runners(ctx: AppContext, clusters: Sequence[Settings], *, role: str = "worker") -> list[WorkerRunner]:
    """One WorkerRunner per cluster (its own settings, scheduler and `role:<cluster>` lease), one database."""
    runners = []
    for settings in clusters:
        cctx = AppContext(settings=settings, engine=ctx.engine, sessions=ctx.sessions)
        services = build_watchdog(cctx) if role == "watchdog" else build_services(cctx)
        runners.append(WorkerRunner(cctx, services, role=role))
    return runners
