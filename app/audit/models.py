"""ORM model for audit events (SPEC §7)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.infra.db import Base, BigId, UTCDateTime, utcnow


class AuditEvent(Base):
    """One thing a component saw or did, with who produced it and when."""

    __tablename__ = "audit_events"
    __table_args__ = (
        # Keyset pagination indexes: every filter combination ends in (produced_at, id).
        Index(None, "produced_at", "id"),
        Index(None, "slurm_job_id", "attempt_index", "produced_at", "id"),
        # A job-only filter (all attempts) must not sort: it has an index of its own.
        Index(None, "slurm_job_id", "produced_at", "id"),
        Index(None, "component", "produced_at", "id"),
        Index(None, "event_type", "produced_at", "id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    component: Mapped[str] = mapped_column(String(32))
    event_type: Mapped[str] = mapped_column(String(96))
    level: Mapped[str] = mapped_column(String(8))
    message: Mapped[str] = mapped_column(Text)
    payload: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    cluster: Mapped[str | None] = mapped_column(String(128))
    slurm_job_id: Mapped[int | None] = mapped_column(BigId)
    attempt_index: Mapped[int | None] = mapped_column(Integer)
    workflow_id: Mapped[int | None] = mapped_column(BigId)
    actor: Mapped[str | None] = mapped_column(String(256))
    produced_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    recorded_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
