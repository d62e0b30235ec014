"""The worker lease: one holder at a time, takeover only after it lapses."""

import asyncio
import datetime as dt

from app.infra.db import utcnow
from app.leases import service as leases


async def test_only_one_holder(sessions) -> None:
    results = await asyncio.gather(
        *(leases.try_acquire(sessions, name="worker:test", holder=f"w{i}", seconds=30) for i in range(5))
    )
    assert sum(r.held for r in results) == 1


async def test_renewal_and_takeover_after_expiry(sessions) -> None:
    now = utcnow()
    first = await leases.try_acquire(sessions, name="worker:test", holder="a", seconds=10, now=now)
    assert first.held and first.epoch == 1
    renewed = await leases.try_acquire(
        sessions, name="worker:test", holder="a", seconds=10, now=now + dt.timedelta(seconds=5)
    )
    assert renewed.held and renewed.epoch == 1
    refused = await leases.try_acquire(
        sessions, name="worker:test", holder="b", seconds=10, now=now + dt.timedelta(seconds=6)
    )
    assert not refused.held and refused.holder == "a"
    taken = await leases.try_acquire(
        sessions, name="worker:test", holder="b", seconds=10, now=now + dt.timedelta(seconds=30)
    )
    assert taken.held and taken.epoch == 2


async def test_release_lets_another_take_over_at_once(sessions) -> None:
    assert (await leases.try_acquire(sessions, name="worker:test", holder="a", seconds=60)).held
    await leases.release(sessions, name="worker:test", holder="a")
    assert (await leases.try_acquire(sessions, name="worker:test", holder="b", seconds=60)).held
