"""Read side of the worker leases: who holds one, under which epoch, until when."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db import utcnow
from app.leases.models import WorkerLease, WorkerPosition


@dataclass(frozen=True)
class LeaseState:
    """What a holder knows after trying: whether it holds the lease and under which epoch."""

    held: bool
    holder: str | None
    epoch: int | None
    expires_at: dt.datetime | None


async def current(sessions: async_sessionmaker[AsyncSession], *, name: str, holder: str) -> LeaseState:
    """The lease as stored, from `holder`'s point of view."""
    async with sessions() as session:
        lease = await session.scalar(select(WorkerLease).where(WorkerLease.name == name))
        if lease is None:
            return LeaseState(False, None, None, None)
        return LeaseState(
            lease.holder == holder and lease.expires_at > utcnow(), lease.holder, lease.epoch, lease.expires_at
        )


async def load_positions(session: AsyncSession, *, names: Sequence[str]) -> dict[str, int]:
    """Stored reader positions by name (absent names were never saved)."""
    rows = (await session.scalars(select(WorkerPosition).where(WorkerPosition.name.in_(list(names))))).all()
    return {row.name: row.position for row in rows}
