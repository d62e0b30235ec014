"""The goodput gauges: the worker recomputes them from the last 24 h of its cluster, at most once a minute."""

from __future__ import annotations

import dataclasses
import datetime as dt

from prometheus_client import REGISTRY

from app.domain.fleetwide.goodput import BUCKETS
from app.goodput import refresh
from app.infra.context import AppContext
from app.infra.db import utcnow
from tests.factories import CLUSTER, seed_history


async def test_goodput_gauges_add_up_and_refresh_once_a_minute(ctx: AppContext) -> None:
    cctx = AppContext(
        settings=dataclasses.replace(ctx.settings, cluster=CLUSTER), engine=ctx.engine, sessions=ctx.sessions
    )
    await seed_history(ctx.sessions, second_running=False, t0=utcnow() - dt.timedelta(hours=2))
    assert await refresh.refresh_metrics(cctx, force=True)
    values = {
        b: REGISTRY.get_sample_value("recovery_goodput_seconds", {"cluster": CLUSTER, "bucket": b}) for b in BUCKETS
    }
    assert sum(v or 0.0 for v in values.values()) == 31 * 60 + 5 and values["productive"] == 19 * 60
    ratio = REGISTRY.get_sample_value("recovery_effective_training_ratio", {"cluster": CLUSTER})
    assert ratio is not None and abs(ratio - 19 * 60 / (31 * 60 + 5)) < 1e-9
    assert not await refresh.refresh_metrics(cctx)  # within the minute: not recomputed
