"""The operator's home page: the last hours' counters and the short list of what needs someone."""

from __future__ import annotations

import datetime as dt

from starlette.requests import Request
from starlette.responses import Response

from app.advice import today
from app.domain.edge import bounds
from app.infra.clusters import every_cluster
from app.infra.config import SettingsError
from app.infra.db import utcnow
from views.auth import guarded
from views.render import dashboard_of, render
from views.urls import current_url

RANGES = (1, 6, 24, 72, 168)  # hours the page offers; 24 by default
DEFAULT_HOURS = 24


def hours_of(request: Request) -> tuple[int, str | None]:
    """The chosen range in hours, and a sentence when the link asked for one the page does not offer."""
    raw = (request.query_params.get("hours") or "").strip()
    if not raw:
        return DEFAULT_HOURS, None
    if raw.isascii() and raw.isdigit() and int(raw) in RANGES:
        return int(raw), None
    shown = ", ".join(str(h) for h in RANGES)
    return DEFAULT_HOURS, f"The range is one of {shown} hours; showing the last {DEFAULT_HOURS} hours."


def cluster_of(request: Request) -> tuple[str | None, str | None]:
    """The cluster asked for (None: every cluster), and a sentence when the value cannot be a cluster name."""
    raw = (request.query_params.get("cluster") or "").strip()
    try:
        return bounds.check_text(raw, "cluster") or None, None
    except bounds.BoundsError as exc:
        return None, f"{exc}; showing every cluster."


@guarded()
async def home(request: Request) -> Response:
    """Home: what happened in the last hours (counters, each a link) and what needs an operator."""
    dashboard = dashboard_of(request)
    hours, problem = hours_of(request)
    cluster, cluster_problem = cluster_of(request)
    now = utcnow()
    async with dashboard.ctx.sessions() as session:
        day = await today.operator_day(session, since=now - dt.timedelta(hours=hours), now=now, cluster=cluster)
    try:
        clusters = sorted({c.cluster for c in every_cluster(dashboard.ctx.settings)})
    except SettingsError:  # a broken clusters file is the worker's to report; the page still offers "all"
        clusters = []
    return render(
        request,
        "home.html",
        {
            "day": day,
            "hours": hours,
            "ranges": RANGES,
            "problem": " ".join(p for p in (problem, cluster_problem) if p) or None,
            "cluster": cluster,
            "clusters": clusters,
            "now": now,
            "storm_pauses": day.storms,
            "self_url": current_url(request),
        },
        partial="_home.html",
    )
