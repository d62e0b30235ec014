"""The log view: the lines around one evidence line of an attempt's log file (read-only, bounded, escaped)."""

from __future__ import annotations

import functools

import anyio
from starlette.requests import Request
from starlette.responses import Response

from app.domain.edge.bounds import BoundsError, parse_int
from app.evidence import queries as evidence_queries
from app.ingest import queries as ingest_queries
from app.ingest.excerpt import pushed_excerpt
from app.ingest.service import PUSH_SCHEME
from app.jobfiles.excerpt import CONTEXT_LINES, read_excerpt
from app.jobfiles.safe_open import AccessRule
from app.jobs import queries as job_queries
from views.auth import guarded
from views.render import dashboard_of, explain, render


@guarded()
async def log_view(request: Request) -> Response:
    """`?path=<a log path Recovery tracks for this attempt>&line=N`: lines N-50..N+50 of that file.

    Only a file the collector opened and read for this attempt is shown, opened again with the job's
    rights (app/jobfiles/safe_open.py), and only while it is still that same file. A pushed stream
    (`push://…`) shows the lines kept of it in the database.
    """
    dashboard = dashboard_of(request)
    slurm_job_id, index = request.path_params["job_id"], request.path_params["attempt_index"]
    path = (request.query_params.get("path") or "")[:4096]
    raw_line = (request.query_params.get("line") or "1").strip()
    back = request.url_for("dashboard:attempt", job_id=slurm_job_id, attempt_index=index).path
    try:
        line = parse_int(raw_line, "line", minimum=1, maximum=10**12 - 1)
    except BoundsError:
        return explain(
            request,
            title="Not a line number",
            status=400,
            message=f"{raw_line[:20]!r} is not a line number.",
            hint="Open the log from an evidence line on Job Details.",
            links=[(f"Job Details {slurm_job_id}/{index}", back)],
        )
    async with dashboard.ctx.sessions() as session:
        attempt = await job_queries.find_attempt(session, slurm_job_id=slurm_job_id, attempt_index=index)
        tracked: set[str] = set()
        accepted: dict[str, tuple[int, int]] = {}
        job = None
        if attempt is not None:
            tracked = await evidence_queries.tracked_log_paths(session, attempt_id=attempt.id, job_id=attempt.job_id)
            accepted = await evidence_queries.accepted_log_files(session, attempt_id=attempt.id, job_id=attempt.job_id)
            job = await job_queries.get_job(session, job_id=attempt.job_id)
    if attempt is None:
        return explain(
            request,
            title="Unknown attempt",
            status=404,
            message=f"No attempt {slurm_job_id}/{index} is recorded.",
            links=[("Workflows Overview", request.url_for("dashboard:workflows").path)],
        )
    tracked |= {p for p in (attempt.stdout_path, attempt.stderr_path) if p}
    if path not in tracked:
        return explain(
            request,
            title="Not a log of this attempt",
            status=404,
            message="The log view shows only files Recovery reads for this attempt."
            + (f" Known here: {', '.join(sorted(tracked)[:5])}." if tracked else " None is recorded yet."),
            links=[(f"Job Details {slurm_job_id}/{index}", back)],
        )
    if path.startswith(PUSH_SCHEME):  # pushed by a collector: the lines kept in the database, not a file
        async with dashboard.ctx.sessions() as session:
            source = await ingest_queries.pushed_source(session, job_id=attempt.job_id, path=path)
            if source is not None:
                excerpt = await pushed_excerpt(session, source, line)
                return render(
                    request,
                    "log.html",
                    {
                        "attempt": attempt,
                        "excerpt": excerpt,
                        "context": CONTEXT_LINES,
                        "back": back,
                        "tracked": sorted(tracked),
                    },
                )
    if path not in accepted:
        return explain(
            request,
            title="Not read by Recovery",
            status=404,
            message="Recovery shows only log files it has read for this attempt, and it has not read this one "
            "(not there yet, or refused: see the attempt's log.refused events).",
            links=[(f"Job Details {slurm_job_id}/{index}", back)],
        )
    settings = dashboard.ctx.settings
    access = AccessRule.for_job(
        uid=job.user_id if job else None,
        gid=job.group_id if job else None,
        user_name=job.user if job else None,
        mode=settings.log_access,
        unknown_uid=settings.log_access_unknown_uid,
        roots=settings.log_dirs,
    )
    excerpt = await anyio.to_thread.run_sync(
        functools.partial(read_excerpt, path, line, access=access, accepted=accepted[path])
    )
    return render(
        request,
        "log.html",
        {"attempt": attempt, "excerpt": excerpt, "context": CONTEXT_LINES, "back": back, "tracked": sorted(tracked)},
    )
