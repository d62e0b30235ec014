"""Notifier: delivers the notification outbox after commit through apprise, with retry and backoff.

The outbox rows are written in the same transaction as the change they report (app.notify.service),
so a crash never loses one; this service fans each new row out to the configured targets that want
its event, then sends the deliveries oldest first. Per target and job, a message is sent only after
every earlier one was, so each job's messages arrive in order; a target that fails waits (1 s
doubling to RECOVERY_NOTIFY_MAX_BACKOFF) without holding up other targets or the worker's loops:
sends run in a thread with a timeout. Delivery is at least once: a crash between the target's
answer and the commit of SENT repeats that one message, which carries its dedup key.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import logging
import random
import warnings
from collections.abc import Callable
from typing import Any

from app.domain.fleetwide.notify import Target, backoff_seconds, parse_targets
from app.infra import metrics
from app.infra.context import AppContext
from app.infra.db import utcnow
from app.infra.log_format import log_context
from app.notify import queries as notify_queries
from app.notify import service as notify_service
from app.notify.queries import PendingDelivery
from worker.service import Service

log = logging.getLogger("recovery.notifier")

SEND_TIMEOUT = 30.0
BACKOFF_BASE = 1.0

Sender = Callable[[Target, str, str], bool]


@functools.cache
def load_apprise() -> Any:
    """Import apprise and its plugins once, in the event loop's thread: one imports the deprecated `imghdr` (a
    DeprecationWarning that is apprise's, not ours; filtering it from a sending thread would not be thread-safe)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*imghdr.*", category=DeprecationWarning)
        import apprise

        apprise.Apprise().details()  # loads every plugin now (they import lazily, the PGP helper among them)
    return apprise


def apprise_send(target: Target, title: str, body: str) -> bool:
    """Send one message to one apprise URL (blocking; run in a thread); True when the target accepted it."""
    apprise = load_apprise()
    sender = apprise.Apprise()
    if not sender.add(target.url):
        raise ValueError(f"apprise does not understand {target.masked}")
    return bool(sender.notify(body=body, title=title))


class Notifier(Service):
    """Fans out and delivers notifications of this cluster; one per cluster (behind the worker's lease).

    It runs without targets too: new outbox rows are then marked fanned out with no delivery, so
    configuring a target later does not replay history.
    """

    name = "notifier"
    needs_lease = True

    def __init__(self, ctx: AppContext, *, sender: Sender | None = None, interval: float = 1.0) -> None:
        super().__init__(interval=interval)
        self.ctx = ctx
        self.settings = ctx.settings
        self.targets = {t.key: t for t in parse_targets(ctx.settings.notify_urls)}
        self.sender = sender or apprise_send
        if sender is None and self.targets:
            load_apprise()
        self.sent = 0
        # A target that just failed is not tried again (for any job) before this time: one probe per backoff.
        self._target_retry_at: dict[str, dt.datetime] = {}
        self._dropped_unconfigured = False

    def link(self, path: str | None) -> str | None:
        """The dashboard URL of a message (RECOVERY_PUBLIC_URL + prefix + path), when a public URL is set."""
        if not path or not self.settings.public_url:
            return None
        return self.settings.public_url.rstrip("/") + self.settings.url_prefix + path

    async def tick(self) -> None:
        cluster = self.settings.cluster
        async with self.ctx.sessions() as session, session.begin():
            await notify_service.fan_out(session, cluster=cluster, targets=list(self.targets.values()))
            # Targets are read once at start: what older processes left for other targets goes once, here.
            dropped = (
                0
                if self._dropped_unconfigured
                else await notify_service.drop_unconfigured(session, cluster=cluster, keep=list(self.targets))
            )
        self._dropped_unconfigured = True
        if dropped:
            log.warning("dropped %d notification(s) for targets no longer in RECOVERY_NOTIFY_URLS", dropped)
        for key in self.targets:
            await self.deliver_target(key)
        async with self.ctx.sessions() as session:
            metrics.NOTIFICATION_BACKLOG.set(await notify_queries.backlog(session, cluster=cluster))

    async def deliver_target(self, key: str) -> None:
        """Try the due deliveries of one target: per job only the oldest; none while the target backs off."""
        async with self.ctx.sessions() as session:
            due = await notify_queries.pending(session, cluster=self.settings.cluster, target=key)
        blocked: set[int | None] = set()  # jobs whose oldest message is not delivered: the later ones wait
        for delivery in due:
            if delivery.slurm_job_id in blocked:
                continue
            now = utcnow()
            if self._target_retry_at.get(key, now) > now:
                return
            if delivery.next_try_at is not None and delivery.next_try_at > now:
                blocked.add(delivery.slurm_job_id)
                continue
            with log_context(job_id=delivery.slurm_job_id):
                if not await self.deliver(delivery):
                    blocked.add(delivery.slurm_job_id)

    async def deliver(self, delivery: PendingDelivery) -> bool:
        """One try of one delivery; its outcome is committed before the next is tried."""
        target = self.targets[delivery.target]
        body = delivery.body
        link = self.link(delivery.link_path)
        if link:
            body += f"\nAttempt page: {link}"
        body += f"\nKey: {delivery.dedup_key}"
        error = ""
        try:
            ok = await asyncio.wait_for(asyncio.to_thread(self.sender, target, delivery.title, body), SEND_TIMEOUT)
            if not ok:
                error = "the target refused the message or did not answer"
        except Exception as exc:  # noqa: BLE001 - any failure of one target is a retry, never a crash
            ok, error = False, f"{type(exc).__name__}: {exc}"
        now = utcnow()
        async with self.ctx.sessions() as session, session.begin():
            if ok:
                await notify_service.mark_sent(session, delivery_id=delivery.delivery_id, now=now)
            else:
                tries = delivery.tries + 1
                delay = backoff_seconds(tries, base=BACKOFF_BASE, ceiling=self.settings.notify_max_backoff)
                delay *= 0.8 + random.random() * 0.4
                retry_at = now + dt.timedelta(seconds=delay)
                await notify_service.mark_failed(
                    session, delivery_id=delivery.delivery_id, tries=tries, error=error, retry_at=retry_at
                )
                self._target_retry_at[delivery.target] = retry_at
        metrics.NOTIFICATIONS.labels(delivery.event, "sent" if ok else "failed").inc()
        if ok:
            self.sent += 1
            self._target_retry_at.pop(delivery.target, None)
            log.info("notification %s sent to %s", delivery.dedup_key, target.masked)
        else:
            log.warning(
                "notification %s to %s failed (try %d): %s; retrying with backoff",
                delivery.dedup_key,
                target.masked,
                delivery.tries + 1,
                error,
            )
        return ok
