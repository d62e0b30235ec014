"""Not enrolled: every job whose comment looked like an APS policy but was refused, paged, counted, searchable."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from app.domain.edge import bounds
from app.jobs import queries as job_queries
from views.auth import guarded
from views.render import dashboard_of, render

PAGE_SIZE = 50


@guarded()
async def not_enrolled(request: Request) -> Response:
    """`?q=` searches job id, name, reason, partition and user; `?before=<row>` pages to older jobs."""
    q = request.query_params
    search = (q.get("q") or "").strip()[: bounds.MAX_SEARCH_LENGTH] or None
    error = None
    try:
        before = bounds.parse_optional_int(q.get("before"), "before")
    except bounds.BoundsError:
        before, error = None, "That page link is not valid; showing the newest jobs."
    async with dashboard_of(request).ctx.sessions() as session:
        jobs, total, more = await job_queries.not_enrolled_page(
            session, limit=PAGE_SIZE, before_id=before, search=search
        )
    return render(
        request,
        "not_enrolled.html",
        {
            "not_enrolled": jobs,
            "not_enrolled_total": total,
            "search": search or "",
            "older": {"q": search, "before": jobs[-1].id} if more and jobs else None,
            "paged": before is not None,
            "error": error,
            "full_list": True,
        },
    )
