"""ORM model of revoked dashboard sessions."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import Index, String
from sqlalchemy.orm import Mapped, mapped_column

from app.infra.db import Base, UTCDateTime, utcnow


class RevokedSession(Base):
    """A dashboard session id that was signed out; kept until the session cookie would have expired anyway."""

    __tablename__ = "revoked_sessions"
    __table_args__ = (Index(None, "expires_at"),)

    session_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    subject: Mapped[str] = mapped_column(String(256))
    revoked_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
