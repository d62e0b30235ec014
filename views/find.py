"""Find by what people know: the jump box (job id, job/attempt, attempt UUID, workflow id) and the HTML 404 page."""

from __future__ import annotations

import re
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response

from app.domain.control.identity import parse_attempt_ref, parse_scheduler_job_id
from app.domain.edge import bounds
from app.jobs import queries as job_queries
from views import urls
from views.auth import guarded
from views.render import dashboard_of, explain
from views.templating import url_path

HINT = (
    "The box takes a Slurm job id (12345, also as job 12345, #12345 or a step 12345.0), "
    "an array task (12345_7), an attempt (12345/1 or 12345-1), "
    "an attempt id (a UUID from the JSON or the API) or a workflow id (the workflow_id of the job's APS comment)."
)


# What sbatch, squeue and sacct print around a job id: "Submitted batch job 7", "job 7", "#7", a step "7.0".
_JOB_WORDS = re.compile(
    r"(?:(?:submitted\s+batch\s+)?job\s*|#)?(\d{1,18}(?:_\d{1,9})?)(?:\.(?:\d{1,6}|batch|extern))?", re.IGNORECASE
)


def _job_in_words(text: str) -> str | None:
    """The job id in what a tool printed around it, when that is all the text holds."""
    found = _JOB_WORDS.fullmatch(text.strip())
    return found.group(1) if found and found.group(1) != text.strip() else None


def _home(request: Request) -> tuple[str, str]:
    return ("Workflows Overview", url_path(request, "dashboard:workflows"))


async def _suggestions(session: Any, request: Request, text: str) -> list[tuple[str, str]]:
    """Links to what the reader may have meant: nearby job ids, workflows whose id contains the text."""
    links: list[tuple[str, str]] = []
    digits = "".join(ch for ch in text if ch in "0123456789")
    if digits and len(digits) <= 10:
        for job in await job_queries.nearby_jobs(session, slurm_job_id=int(digits), limit=3):
            links.append((f"job {job.slurm_job_id}", url_path(request, "dashboard:job", job_id=job.slurm_job_id)))
    if text.strip():
        for w in await job_queries.similar_workflows(session, text=text, limit=3):
            links.append((f"workflow {w.workflow_key}", workflow_path(request, w.workflow_key)))
    links.append(("Search the Overview", url_path(request, "dashboard:workflows", {"q": text})))
    return links


def workflow_path(request: Request, key: str, cluster: str | None = None) -> str:
    """The stable URL of a workflow: /dashboard/workflow/<workflow id> (plus ?cluster= when asked)."""
    return urls.workflow_path(request, key, {"cluster": cluster} if cluster else None)


@guarded()
async def go(request: Request) -> Response:
    """The jump box: resolve what was typed server-side and redirect to its page, or say what was tried."""
    text = (request.query_params.get("q") or request.query_params.get("job") or "").strip()[: bounds.MAX_SEARCH_LENGTH]
    if not text:
        return explain(
            request,
            title="Find a job",
            status=400,
            message="Type something to find.",
            hint=HINT,
            links=[_home(request)],
        )
    async with dashboard_of(request).ctx.sessions() as session:
        ref = parse_attempt_ref(text)
        if ref is not None:
            attempt = await job_queries.find_attempt_by_ref(session, ref=text)
            if attempt is not None:
                return RedirectResponse(
                    url_path(
                        request, "dashboard:attempt", job_id=attempt.slurm_job_id, attempt_index=attempt.attempt_index
                    ),
                    status_code=303,
                )
            if ref.kind == "index" and ref.job_id is not None:
                job = await job_queries.find_job(session, slurm_job_id=ref.job_id)
                if job is not None:
                    known = await job_queries.count_attempts_of_jobs(session, job_ids=[job.id])
                    return explain(
                        request,
                        title="Attempt not found",
                        status=404,
                        message=f"Job {ref.job_id} has no attempt {ref.attempt_index}; "
                        f"{known.get(job.id, 0)} attempt(s) are recorded (attempt 0 is the first execution).",
                        links=[(f"job {ref.job_id}", url_path(request, "dashboard:job", job_id=ref.job_id))],
                    )
        job_ref = parse_scheduler_job_id(text)
        if job_ref is not None:
            found = await job_queries.find_job_by_scheduler_id(session, ref=job_ref)
            if found is not None:
                return RedirectResponse(url_path(request, "dashboard:job", job_id=found.slurm_job_id), status_code=303)
        workflows = await job_queries.find_workflows_by_key(session, key=text, limit=2)
        if workflows:
            return RedirectResponse(workflow_path(request, workflows[0].workflow_key), status_code=303)
        plain = _job_in_words(text)
        job_ref = parse_scheduler_job_id(plain) if plain else None
        if job_ref is not None:
            found = await job_queries.find_job_by_scheduler_id(session, ref=job_ref)
            if found is not None:
                return RedirectResponse(url_path(request, "dashboard:job", job_id=found.slurm_job_id), status_code=303)
        links = await _suggestions(session, request, text)
    return explain(
        request,
        title="Nothing found",
        status=404,
        message=f"No job, attempt or workflow matches {text[:80]!r}.",
        hint=HINT + " Jobs appear once the observer sees them in squeue with an APS policy in their --comment.",
        links=links,
    )


async def not_found(request: Request, exc: Exception) -> Response:
    """An unknown path under /dashboard: an HTML page that says what to try (API paths keep their JSON 404)."""
    if "dashboard" not in request.scope:
        detail = getattr(exc, "detail", None) or "Not Found"
        if "/v1/" in request.url.path:  # the REST API's error shape
            return JSONResponse(
                {"error": {"code": "NOT_FOUND", "message": f"no such endpoint: {request.url.path[:120]}"}},
                status_code=404,
            )
        return PlainTextResponse(str(detail), status_code=404)
    return explain(
        request,
        title="Page not found",
        status=404,
        message=f"There is no dashboard page at {request.url.path[:120]}.",
        hint=HINT,
        links=[_home(request), ("Advice", url_path(request, "dashboard:advice"))],
    )
