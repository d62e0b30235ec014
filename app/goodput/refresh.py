"""Keeps the goodput gauges (app/infra/metrics.py) current: the last 24 h of a cluster, at most once a minute."""

from __future__ import annotations

import datetime as dt
import time

from app.domain.fleetwide.goodput import BUCKETS
from app.goodput import queries
from app.infra import metrics
from app.infra.context import AppContext
from app.infra.db import utcnow

WINDOW = dt.timedelta(hours=24)
EVERY = 60.0
_last: dict[str, float] = {}


async def refresh_metrics(ctx: AppContext, *, force: bool = False) -> bool:
    """Recompute the cluster's goodput gauges when a minute has passed; True when it did."""
    cluster = ctx.settings.cluster
    now_mono = time.monotonic()
    if not force and now_mono - _last.get(cluster, -EVERY) < EVERY:
        return False
    _last[cluster] = now_mono
    async with ctx.sessions() as session:
        report = await queries.cluster_goodput(session, cluster=cluster, since=utcnow() - WINDOW)
    for bucket in BUCKETS:
        metrics.GOODPUT_SECONDS.labels(cluster, bucket).set(getattr(report.total, bucket))
    wall = report.total.wall
    metrics.EFFECTIVE_TRAINING.labels(cluster).set(report.total.productive / wall if wall > 0 else 0.0)
    return True
