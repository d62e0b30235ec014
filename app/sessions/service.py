"""Writes of revoked sessions: sign-out records the session id; expired records are pruned on the way."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.infra.db import utcnow
from app.sessions.models import RevokedSession


async def revoke_session(session: AsyncSession, *, session_id: str, subject: str, expires_at: dt.datetime) -> None:
    """Record that `session_id` was signed out (idempotent); prune records whose cookies have expired."""
    now = utcnow()
    await session.execute(delete(RevokedSession).where(RevokedSession.expires_at < now))
    existing = await session.scalar(select(RevokedSession).where(RevokedSession.session_id == session_id))
    if existing is None:
        session.add(RevokedSession(session_id=session_id, subject=subject, revoked_at=now, expires_at=expires_at))
    await session.flush()
