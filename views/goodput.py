"""Goodput in the dashboard: a server-rendered SVG per workflow (one bar per job run, one colour per bucket) and
the cluster summary page (docs/goodput.md)."""

from __future__ import annotations

import datetime as dt

from markupsafe import Markup, escape
from starlette.requests import Request
from starlette.responses import Response

from app.domain.edge import bounds
from app.domain.fleetwide.goodput import BUCKETS, Breakdown
from app.goodput import queries as goodput_queries
from app.goodput.queries import GoodputReport
from app.infra.db import utcnow
from views.auth import guarded
from views.inputs import query_int, query_text
from views.render import dashboard_of, render

COLOURS = {
    "productive": "#15803d",
    "startup": "#94a3b8",
    "restart_to_progress": "#f59e0b",
    "lost_since_checkpoint": "#dc2626",
    "detection_delay": "#a855f7",
    "decision_to_release": "#2563eb",
    "queue_wait": "#64748b",
}
LABELS = {
    "productive": "productive",
    "startup": "startup",
    "restart_to_progress": "restart → first progress",
    "lost_since_checkpoint": "work since last checkpoint",
    "detection_delay": "detection delay",
    "decision_to_release": "decision → release",
    "queue_wait": "queue wait after release",
}
MAX_BARS = 20
HOURS = (1, 6, 24, 168, 720)


def seconds_text(value: float) -> str:
    """1234.5 -> "20 min 34 s"; short and exact enough for a table."""
    value = round(value)
    if value < 60:
        return f"{value} s"
    if value < 3600:
        return f"{value // 60} min {value % 60} s"
    return f"{value // 3600} h {(value % 3600) // 60} min"


def goodput_svg(report: GoodputReport, *, width: int = 1000) -> Markup:
    """One bar per job run (newest MAX_BARS), its segments in time order, scaled to the longest run."""
    runs = [job for job in report.jobs if job.run.start is not None][-MAX_BARS:]
    label_w, row_h, top = 110, 26, 6
    height = top + max(len(runs), 1) * row_h + 4
    longest = max((job.run.total.wall for job in runs), default=0.0) or 1.0
    plot_w = width - label_w - 8
    out = [
        f'<svg class="goodput" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="100%" '
        f'role="img" aria-label="Goodput of {len(runs)} run(s): where each run\'s wall time went">'
    ]
    if not runs:
        out.append(f'<text x="6" y="{top + 16}" font-size="12" fill="#5b6475">No run has started yet.</text>')
    for i, job in enumerate(runs):
        y = top + i * row_h
        start = job.run.start
        assert start is not None
        out.append(f'<g class="run" data-job="{job.slurm_job_id}" data-wall="{job.run.total.wall:.3f}">')
        percent = job.run.total.effective_percent
        label = f"job {job.slurm_job_id}" + (f" · {percent:.0f}%" if percent is not None else "")
        out.append(f'<text x="4" y="{y + 16}" font-size="12" fill="#1f2937">{escape(label)}</text>')
        for seg in job.run.segments:
            x = label_w + (seg.start - start).total_seconds() / longest * plot_w
            w = max(seg.seconds / longest * plot_w, 0.5)
            tip = f"attempt {seg.attempt_index}: {LABELS[seg.bucket]} {seconds_text(seg.seconds)}"
            out.append(
                f'<rect class="seg {seg.bucket}" data-bucket="{seg.bucket}" data-seconds="{seg.seconds:.3f}" '
                f'x="{x:.1f}" y="{y + 4}" width="{w:.1f}" height="{row_h - 8}" fill="{COLOURS[seg.bucket]}">'
                f"<title>{escape(tip)}</title></rect>"
            )
        out.append("</g>")
    out.append("</svg>")
    return Markup("".join(out))


def bucket_rows(total: Breakdown) -> list[dict[str, object]]:
    """The table rows of a breakdown: bucket, label, colour, seconds, share of the wall time."""
    wall = total.wall or 1.0
    return [
        {
            "bucket": name,
            "label": LABELS[name],
            "colour": COLOURS[name],
            "seconds": getattr(total, name),
            "text": seconds_text(getattr(total, name)),
            "percent": round(100 * getattr(total, name) / wall, 1),
        }
        for name in BUCKETS
    ]


async def workflow_goodput(session: object, *, workflow_id: int) -> dict[str, object]:
    """The template context of a workflow's goodput section."""
    report = await goodput_queries.workflow_goodput(session, workflow_id=workflow_id)  # type: ignore[arg-type]
    return {"report": report, "svg": goodput_svg(report), "rows": bucket_rows(report.total), "seconds": seconds_text}


@guarded()
async def cluster_goodput(request: Request) -> Response:
    """Goodput summary of one cluster (or all) over the last N hours."""
    dashboard = dashboard_of(request)
    cluster = query_text(request, "cluster")
    hours = query_int(request, "hours", maximum=bounds.INT32_MAX) or 168
    hours = hours if hours in HOURS else 168
    async with dashboard.ctx.sessions() as session:
        report = await goodput_queries.cluster_goodput(
            session, cluster=cluster, since=utcnow() - dt.timedelta(hours=hours)
        )
    return render(
        request,
        "goodput.html",
        {
            "cluster": cluster,
            "hours": hours,
            "choices": HOURS,
            "report": report,
            "rows": bucket_rows(report.total),
            "svg": goodput_svg(report),
            "seconds": seconds_text,
        },
    )
