"""ORM model for the change feed: the table is the truth, NOTIFY only wakes readers."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.infra.db import Base, BigId, UTCDateTime, utcnow


class ChangeFeedEntry(Base):
    """One change worth telling live readers about; ids grow in commit order."""

    __tablename__ = "change_feed"
    __table_args__ = (Index(None, "topic", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    topic: Mapped[str] = mapped_column(String(32))  # attempt | job | workflow | advice | audit | anomaly | checkpoint
    entity_id: Mapped[int | None] = mapped_column(BigId)
    cluster: Mapped[str | None] = mapped_column(String(128))
    workflow_id: Mapped[int | None] = mapped_column(BigId)
    slurm_job_id: Mapped[int | None] = mapped_column(BigId)
    attempt_index: Mapped[int | None] = mapped_column(Integer)
    payload: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
