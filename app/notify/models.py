"""ORM models of the notification outbox and its per-target deliveries."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import Boolean, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.infra.db import Base, BigId, UTCDateTime, utcnow


class Notification(Base):
    """One event worth telling people, written in the same transaction as the change (dedup_key: once)."""

    __tablename__ = "notifications"
    __table_args__ = (Index(None, "fanned_out", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    dedup_key: Mapped[str] = mapped_column(String(200), unique=True)
    event: Mapped[str] = mapped_column(String(32))  # terminate | restart | abandoned | watchdog_release | ...
    cluster: Mapped[str] = mapped_column(String(128))
    slurm_job_id: Mapped[int | None] = mapped_column(BigId)
    attempt_index: Mapped[int | None] = mapped_column(Integer)
    advice_id: Mapped[int | None] = mapped_column(BigId)
    generation: Mapped[int | None] = mapped_column(BigId)
    title: Mapped[str] = mapped_column(Text)
    body: Mapped[str] = mapped_column(Text)
    link_path: Mapped[str | None] = mapped_column(Text)  # under the dashboard; RECOVERY_PUBLIC_URL is added at delivery
    fanned_out: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class NotificationDelivery(Base):
    """One notification for one configured target (identified by a hash of its URL, never the URL)."""

    __tablename__ = "notification_deliveries"
    __table_args__ = (
        UniqueConstraint("notification_id", "target"),
        Index(None, "status", "cluster", "id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    notification_id: Mapped[int] = mapped_column(ForeignKey("notifications.id", ondelete="CASCADE"))
    target: Mapped[str] = mapped_column(String(32))
    cluster: Mapped[str] = mapped_column(String(128))
    slurm_job_id: Mapped[int | None] = mapped_column(BigId)
    status: Mapped[str] = mapped_column(String(16), default="PENDING")  # PENDING | SENT | DROPPED
    tries: Mapped[int] = mapped_column(Integer, default=0)
    next_try_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    last_error: Mapped[str | None] = mapped_column(Text)
    sent_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
