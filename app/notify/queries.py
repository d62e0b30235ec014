"""Read side of notifications: the deliveries to try, oldest first, and the backlog."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.notify.models import Notification, NotificationDelivery

PENDING = "PENDING"


@dataclass(frozen=True)
class PendingDelivery:
    """One delivery still to make, with its message."""

    delivery_id: int
    target: str
    tries: int
    next_try_at: dt.datetime | None
    event: str
    dedup_key: str
    slurm_job_id: int | None
    title: str
    body: str
    link_path: str | None


async def pending(session: AsyncSession, *, cluster: str, target: str, limit: int = 500) -> list[PendingDelivery]:
    """One target's undelivered messages of the cluster in the order they were written (kept per job)."""
    rows = (
        await session.execute(
            select(NotificationDelivery, Notification)
            .join(Notification, Notification.id == NotificationDelivery.notification_id)
            .where(
                NotificationDelivery.status == PENDING,
                NotificationDelivery.cluster == cluster,
                NotificationDelivery.target == target,
            )
            .order_by(NotificationDelivery.id)
            .limit(limit)
        )
    ).all()
    return [
        PendingDelivery(
            delivery_id=d.id,
            target=d.target,
            tries=d.tries,
            next_try_at=d.next_try_at,
            event=n.event,
            dedup_key=n.dedup_key,
            slurm_job_id=n.slurm_job_id,
            title=n.title,
            body=n.body,
            link_path=n.link_path,
        )
        for d, n in rows
    ]


async def backlog(session: AsyncSession, *, cluster: str) -> int:
    """Deliveries of the cluster not yet made, plus outbox rows not yet fanned out."""
    deliveries = await session.scalar(
        select(func.count(NotificationDelivery.id)).where(
            NotificationDelivery.status == PENDING, NotificationDelivery.cluster == cluster
        )
    )
    unfanned = await session.scalar(
        select(func.count(Notification.id)).where(Notification.fanned_out.is_(False), Notification.cluster == cluster)
    )
    return int(deliveries or 0) + int(unfanned or 0)
