"""Acquire, renew and release a named database lease atomically on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
from typing import Any, cast

from sqlalchemy import case, update
from sqlalchemy.engine import CursorResult
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.infra.db import utcnow
from app.leases import queries
from app.leases.models import WorkerLease, WorkerPosition
from app.leases.queries import LeaseState


async def try_acquire(
    sessions: async_sessionmaker[AsyncSession],
    *,
    name: str,
    holder: str,
    seconds: float,
    now: dt.datetime | None = None,
    reclaim: bool = False,
) -> LeaseState:
    """Take or renew the lease when it is ours or has lapsed; one conditional UPDATE decides.

    ``reclaim``: a new process of the same holder takes its previous process's lease back at once,
    under a new epoch (so nothing fenced by the old epoch passes).
    """
    now = now or utcnow()
    expires = now + dt.timedelta(seconds=seconds)
    same = WorkerLease.epoch + 1 if reclaim else WorkerLease.epoch
    async with sessions() as session, session.begin():
        result = await session.execute(
            update(WorkerLease)
            .where(WorkerLease.name == name)
            .where((WorkerLease.holder == holder) | (WorkerLease.expires_at < now))
            .values(
                epoch=case((WorkerLease.holder == holder, same), else_=WorkerLease.epoch + 1),
                holder=holder,
                expires_at=expires,
                renewed_at=now,
            )
            .execution_options(synchronize_session=False)
        )
        if cast(CursorResult[Any], result).rowcount == 1:
            lease = await session.get(WorkerLease, name, populate_existing=True)
            assert lease is not None
            return LeaseState(True, holder, lease.epoch, lease.expires_at)
    try:
        async with sessions() as session, session.begin():
            existing = await session.get(WorkerLease, name)
            if existing is None:
                session.add(
                    WorkerLease(name=name, holder=holder, epoch=1, expires_at=expires, acquired_at=now, renewed_at=now)
                )
                await session.flush()
                return LeaseState(True, holder, 1, expires)
            return LeaseState(False, existing.holder, existing.epoch, existing.expires_at)
    except IntegrityError:
        return await queries.current(sessions, name=name, holder=holder)


async def release(sessions: async_sessionmaker[AsyncSession], *, name: str, holder: str) -> None:
    """Give the lease up at shutdown so another worker can take over at once."""
    async with sessions() as session, session.begin():
        await session.execute(
            update(WorkerLease)
            .where(WorkerLease.name == name, WorkerLease.holder == holder)
            .values(expires_at=utcnow() - dt.timedelta(seconds=1))
            .execution_options(synchronize_session=False)
        )


async def save_positions(session: AsyncSession, *, positions: dict[str, int]) -> None:
    """Store reader positions (insert or update), so a restarted worker resumes where this one stopped."""
    now = utcnow()
    for name, position in positions.items():
        result = await session.execute(
            update(WorkerPosition)
            .where(WorkerPosition.name == name)
            .values(position=position, updated_at=now)
            .execution_options(synchronize_session=False)
        )
        if cast(CursorResult[Any], result).rowcount == 0:
            session.add(WorkerPosition(name=name, position=position, updated_at=now))
    await session.flush()
