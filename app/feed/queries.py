"""Read side of the change feed: entries after a position, and the newest position."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.feed.models import ChangeFeedEntry
from app.infra import metrics
from app.infra.db import utcnow


async def read_since(
    session: AsyncSession,
    *,
    after_id: int,
    topics: Iterable[str] | None = None,
    limit: int = 500,
) -> Sequence[ChangeFeedEntry]:
    """Entries with id greater than after_id, oldest first (optionally only some topics)."""
    query = select(ChangeFeedEntry).where(ChangeFeedEntry.id > after_id)
    wanted = sorted(set(topics)) if topics is not None else None
    if wanted is not None:
        query = query.where(ChangeFeedEntry.topic.in_(wanted))
    query = query.order_by(ChangeFeedEntry.id).limit(limit)
    entries = (await session.scalars(query)).all()
    if entries:  # how long the oldest entry waited for this reader
        lag = metrics.seconds_since(entries[0].created_at, utcnow())
        if lag is not None:
            metrics.FEED_LAG.labels(",".join(wanted) if wanted else "all").set(lag)
    return entries


async def latest_id(session: AsyncSession) -> int:
    """The id of the newest entry (0 for an empty feed): where a new reader starts."""
    value = await session.scalar(select(ChangeFeedEntry.id).order_by(ChangeFeedEntry.id.desc()).limit(1))
    return int(value or 0)
