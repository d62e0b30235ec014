"""Runs the worker's services behind the cluster's database lease: they start when it is won and stop when it
is lost."""

from __future__ import annotations

import asyncio
import logging
import time

from app.advice import queries as advice_queries
from app.goodput import refresh as goodput_refresh
from app.infra import metrics
from app.infra.context import AppContext
from app.infra.errors import database_error_text, database_problem
from app.leases import queries as lease_queries
from app.leases import service as leases
from worker import identity
from worker.service import Service

log = logging.getLogger("recovery.worker")

WAITING_LOG_SECONDS = 30.0


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
        self.identity = identity.claim(ctx.settings.data_dir, role) if holder is None else None
        self.holder = holder or (self.identity.holder if self.identity else "")
        self.has_lease = False
        self.epoch: int | None = None
        self._reclaim = bool(self.identity and self.identity.persistent)  # first try of a persistent identity
        self._waiting_for: tuple[str | None, int | None] | None = None
        self._waiting_logged = 0.0
        self._stop = asyncio.Event()
        self.refreshed = asyncio.Event()  # set after the first try for the lease (won or not)
        for service in services:
            if hasattr(service, "fence"):  # services that change Slurm fence each command on the lease
                service.fence = self.verify_lease

    async def verify_lease(self) -> bool:
        """Fencing check right before a scheduler command: the lease is still ours under the epoch we won."""
        if not self.has_lease or self.epoch is None:
            return False
        try:
            state = await lease_queries.current(self.ctx.sessions, name=self.lease, holder=self.holder)
        except Exception as exc:
            if database_problem(exc) is None:
                log.exception("lease %s: could not check it before a scheduler command", self.lease)
            else:
                log.warning("lease %s: unchecked before a scheduler command (%s)", self.lease, database_error_text(exc))
            return False
        return state.held and state.epoch == self.epoch

    @property
    def lease(self) -> str:
        return lease_name(self.ctx.settings.cluster, self.role)

    async def _refresh_lease(self) -> None:
        reclaim = self._reclaim and not self.has_lease
        if reclaim:
            reclaim = await self._held_by_our_previous_process()
        try:
            state = await leases.try_acquire(
                self.ctx.sessions,
                name=self.lease,
                holder=self.holder,
                seconds=self.ctx.settings.lease_seconds,
                reclaim=reclaim,
            )
        except Exception as exc:
            log.warning(
                "lease %s: could not reach the database (%s); lease-bound services stop until it answers",
                self.lease,
                database_error_text(exc),
            )
            state = lease_queries.LeaseState(False, None, None, None)
        if state.held:
            self._reclaim = False
            self._waiting_for = None
        else:
            self._log_waiting(state)
        if state.held and not self.has_lease:
            log.info(
                "lease %s %s by %s (epoch %s)",
                self.lease,
                "reclaimed from this worker's previous process" if reclaim else "acquired",
                self.holder,
                state.epoch,
            )
            for service in self.services:
                service.start()
        elif not state.held and self.has_lease:
            log.warning(
                "lease %s lost to %s; stopping lease-bound services",
                self.lease,
                state.holder or "nobody (the database did not answer)",
            )
            await asyncio.gather(*(s.stop() for s in self.services))
        self.has_lease, self.epoch = state.held, state.epoch
        metrics.set_lease(self.lease, self.holder, held=state.held, epoch=state.epoch if state.held else None)
        if state.held and self.role == "worker":
            await self._count_active_advice()
        self.refreshed.set()

    async def _count_active_advice(self) -> None:
        """Refresh the active-Advice gauge (every operation, so one that reached zero shows 0)."""
        cluster = self.ctx.settings.cluster
        try:
            async with self.ctx.sessions() as session:
                counts = await advice_queries.active_counts(session, cluster=cluster)
        except Exception as exc:
            if database_problem(exc) is None:
                log.exception("could not count active Advice for the metrics")
            return
        for operation in ("RESTART", "TERMINATE", *counts):
            metrics.ACTIVE_ADVICE.labels(cluster, operation).set(counts.get(operation, 0))
        try:
            await goodput_refresh.refresh_metrics(self.ctx)  # at most once a minute
        except Exception as exc:
            if database_problem(exc) is None:
                log.exception("could not compute goodput for the metrics")

    async def _held_by_our_previous_process(self) -> bool:
        """Our identity still holds (or last held) the lease: a previous process of ours died without releasing it."""
        try:
            state = await lease_queries.current(self.ctx.sessions, name=self.lease, holder=self.holder)
        except Exception:  # the acquisition below reports the database problem
            return False
        if state.holder != self.holder:
            self._reclaim = False  # someone else's (or no) lease: the ordinary rules apply
            return False
        until = state.expires_at.isoformat(timespec="seconds") if state.expires_at else "unknown"
        log.info("lease %s: held by this worker's previous process until %s; taking it back now", self.lease, until)
        return True

    def _log_waiting(self, state: lease_queries.LeaseState) -> None:
        """Say what we wait for and until when: at once when the holder changes, then every 30 s."""
        if state.holder is None:
            return  # the database did not answer (logged above)
        key = (state.holder, state.epoch)
        now = time.monotonic()
        if key == self._waiting_for and now - self._waiting_logged < WAITING_LOG_SECONDS:
            return
        self._waiting_for, self._waiting_logged = key, now
        until = state.expires_at.isoformat(timespec="seconds") if state.expires_at else "unknown"
        log.info(
            "waiting for lease %s: held by %s (epoch %s) until %s; this worker is %s, next try in %.1f s",
            self.lease,
            state.holder,
            state.epoch,
            until,
            self.holder,
            self._interval,
        )

    @property
    def _interval(self) -> float:
        return max(0.2, self.ctx.settings.lease_seconds / 3)

    async def run(self) -> None:
        """Run until stop() is called; release the lease on the way out."""
        try:
            while not self._stop.is_set():
                await self._refresh_lease()
                try:
                    await asyncio.wait_for(self._stop.wait(), timeout=self._interval)
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
            if self.identity is not None:
                self.identity.close()

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
