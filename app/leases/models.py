"""ORM model for worker leases."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import BigInteger, String
from sqlalchemy.orm import Mapped, mapped_column

from app.infra.db import Base, UTCDateTime, utcnow


class WorkerLease(Base):
    """Who holds a named lease (e.g. `worker:<cluster>`) and until when."""

    __tablename__ = "worker_leases"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    holder: Mapped[str] = mapped_column(String(256))
    # Bumped on every takeover so a stale holder can tell it lost the lease (fencing token).
    epoch: Mapped[int] = mapped_column(BigInteger, default=1)
    expires_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    acquired_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    renewed_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class WorkerPosition(Base):
    """A durable reader position of a worker service (e.g. the advisor's change-feed and anomaly ids)."""

    __tablename__ = "worker_positions"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    position: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
