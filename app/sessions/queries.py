"""Reads of revoked sessions."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.sessions.models import RevokedSession


async def is_revoked(session: AsyncSession, *, session_id: str) -> bool:
    """True when this dashboard session was signed out."""
    found = await session.scalar(select(RevokedSession.session_id).where(RevokedSession.session_id == session_id))
    return found is not None
