"""The Service base class every background loop shares: start/stop, backoff on errors."""

from __future__ import annotations

import asyncio
import logging
from typing import ClassVar

from app.domain.control.backoff import exponential, jittered
from app.infra import metrics
from app.infra.errors import database_error_text, database_problem
from app.infra.log_format import log_context

log = logging.getLogger("recovery.worker")


class Service:
    """A loop that calls `tick()` every `interval` seconds until stopped; errors back off, never kill it."""

    name: ClassVar[str] = "service"

    def __init__(self, *, interval: float = 1.0, max_backoff: float = 30.0) -> None:
        self.interval = interval
        self.max_backoff = max_backoff
        self.failures = 0
        self.ticks = 0
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def tick(self) -> None:
        """Do one round of work; subclasses override."""
        raise NotImplementedError

    async def on_stop(self) -> None:
        """Release resources when the loop ends; subclasses may override."""

    def wake(self) -> None:
        """Run the next tick now instead of waiting for the interval."""
        self._wake.set()

    def start(self) -> None:
        """Start the loop as a task (no-op when already running)."""
        if self._task is None:
            self._stop.clear()
            self._task = asyncio.create_task(self._loop(), name=f"service:{self.name}")

    async def stop(self, timeout: float = 10.0) -> None:
        """Ask the loop to finish its current tick and wait for it (cancel after `timeout`)."""
        if self._task is None:
            return
        self._stop.set()
        self._wake.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout)
        except TimeoutError:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        finally:
            self._task = None
            await self.on_stop()

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def _delay(self) -> float:
        if not self.failures:
            return self.interval
        return jittered(exponential(self.failures, base=self.interval, cap=self.max_backoff))

    async def _loop(self) -> None:
        # every line of this loop's task names the service and the cluster it works for (with several clusters in one
        # process, or the demo's lab cluster, that is not the installation's RECOVERY_CLUSTER)
        settings = getattr(getattr(self, "ctx", None), "settings", None)
        with log_context(component=self.name, cluster=getattr(settings, "cluster", None)):
            await self._run_loop()

    async def _run_loop(self) -> None:
        while not self._stop.is_set():
            try:
                with log_context():  # job/Advice fields bound during a tick end with it
                    await self.tick()
                self.failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.failures += 1
                metrics.SERVICE_TICK_FAILURES.labels(self.name).inc()
                if database_problem(exc) is not None:  # an outage, not a bug: one line, no traceback
                    log.warning(
                        "%s: database unavailable (%s), %d tick(s) in a row; backing off",
                        self.name,
                        database_error_text(exc),
                        self.failures,
                    )
                else:
                    log.exception("%s: tick failed (%d in a row); backing off", self.name, self.failures)
            self.ticks += 1
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=self._delay())
            except TimeoutError:
                pass
