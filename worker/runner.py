"""Runs the worker's services behind the cluster's database lease: they start when it is won and stop when it
is lost."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid

from app import metrics
from app.advice import queries as advice_queries
from app.context import AppContext
from app.leases import queries as lease_queries
from app.leases import service as leases
from worker.service import Service

log = logging.getLogger("recovery.worker")


def lease_name(cluster: str, role: str = "worker") -> str:
    """One lease per cluster and role: only its holder observes, decides and acts (or, role watchdog, releases)."""
    return f"{role}:{cluster}"


class WorkerRunner:
    """Holds the lease and starts/stops lease-bound services as it is won or lost."""

    def __init__(
        self, ctx: AppContext, services: list[Service], *, holder: str | None = None, role: str = "worker"
    ) -> None:
        self.ctx = ctx
        self.services = services
        self.role = role
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.has_lease = False
        self.epoch: int | None = None
        self._stop = asyncio.Event()
        for service in services:
            if hasattr(service, "fence"):  # services that change Slurm fence each command on the lease
                service.fence = self.verify_lease

    async def verify_lease(self) -> bool:
        """Fencing check right before a scheduler command: the lease is still ours under the epoch we won."""
        if not self.has_lease or self.epoch is None:
            return False
        try:
            state = await lease_queries.current(self.ctx.sessions, name=self.lease, holder=self.holder)
        except Exception:
            log.exception("lease %s: could not check it before a scheduler command", self.lease)
            return False
        return state.held and state.epoch == self.epoch

    @property
    def lease(self) -> str:
        return lease_name(self.ctx.settings.cluster, self.role)

    async def _refresh_lease(self) -> None:
        try:
            state = await leases.try_acquire(
                self.ctx.sessions, name=self.lease, holder=self.holder, seconds=self.ctx.settings.lease_seconds
            )
        except Exception:
            log.exception("lease %s: could not reach the database; stopping lease-bound services", self.lease)
            state = lease_queries.LeaseState(False, None, None, None)
        if state.held and not self.has_lease:
            log.info("lease %s acquired by %s (epoch %s)", self.lease, self.holder, state.epoch)
            for service in self.services:
                service.start()
        elif not state.held and self.has_lease:
            log.warning("lease %s lost to %s; stopping lease-bound services", self.lease, state.holder)
            await asyncio.gather(*(s.stop() for s in self.services))
        self.has_lease, self.epoch = state.held, state.epoch
        metrics.set_lease(self.lease, self.holder, held=state.held, epoch=state.epoch if state.held else None)
        if state.held and self.role == "worker":
            await self._count_active_advice()

    async def _count_active_advice(self) -> None:
        """Refresh the active-Advice gauge (every operation, so one that reached zero shows 0)."""
        cluster = self.ctx.settings.cluster
        try:
            async with self.ctx.sessions() as session:
                counts = await advice_queries.active_counts(session, cluster=cluster)
        except Exception:
            log.exception("could not count active Advice for the metrics")
            return
        for operation in ("RESTART", "TERMINATE", *counts):
            metrics.ACTIVE_ADVICE.labels(cluster, operation).set(counts.get(operation, 0))

    async def run(self) -> None:
        """Run until stop() is called; release the lease on the way out."""
        try:
            while not self._stop.is_set():
                await self._refresh_lease()
                try:
                    await asyncio.wait_for(self._stop.wait(), timeout=max(0.2, self.ctx.settings.lease_seconds / 3))
                except TimeoutError:
                    pass
        finally:
            await asyncio.gather(*(s.stop() for s in self.services))
            await self._close_schedulers()
            if self.has_lease:
                try:
                    await leases.release(self.ctx.sessions, name=self.lease, holder=self.holder)
                except Exception:
                    log.exception("could not release lease %s", self.lease)
            self.has_lease = False

    async def _close_schedulers(self) -> None:
        """Close what the services' schedulers hold open (the slurmrestd adapter's HTTP connections)."""
        found = [getattr(service, "scheduler", None) for service in self.services]
        schedulers = {id(scheduler): scheduler for scheduler in found if scheduler is not None}
        for scheduler in schedulers.values():
            close = getattr(scheduler, "aclose", None)
            if close is not None:
                try:
                    await close()
                except Exception:
                    log.exception("could not close scheduler %r", scheduler)

    def stop(self) -> None:
        """Ask run() to finish."""
        self._stop.set()
