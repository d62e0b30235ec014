"""Dashboard URLs with ids in them: every id enters a URL through `url_segment` (percent-encoded), so a job-controlled
workflow id holding `?`, `#`, `/`, `%2F`, CR/LF or `../../v1/installation` names that workflow and nothing else."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from starlette.requests import Request

# What a browser resolves as "this directory" or "its parent" (also when percent-encoded, by the URL standard):
# such an id cannot be a path segment at all, so it travels in the query string instead; so does one with a line
# break (the router's patterns do not match across lines).
_DOT_SEGMENTS = frozenset({".", ".."})


def _fits_a_path(key: str) -> bool:
    return key not in _DOT_SEGMENTS and "\n" not in key and "\r" not in key


def url_segment(value: object) -> str:
    """One path segment holding `value`: everything but letters, digits and `-._~` percent-encoded."""
    return quote(str(value), safe="")


def url_path(request: Request, name: str, query: dict[str, Any] | None = None, **params: Any) -> str:
    """The path of route `name` as the browser must request it (root path and URL prefix included), each parameter
    one percent-encoded segment."""
    path = request.url_for(name, **{k: url_segment(v) for k, v in params.items()}).path
    if query:
        clean = {k: v for k, v in query.items() if v not in (None, "", False)}
        if clean:
            path += "?" + urlencode(clean, doseq=True)
    return path


def workflow_path(request: Request, key: str, query: dict[str, Any] | None = None) -> str:
    """The stable URL of a workflow: /dashboard/workflow/<workflow id>, or /dashboard/workflow/?id=<workflow id> for
    an id no path segment can hold (`.`, `..`, line breaks)."""
    if not _fits_a_path(key):
        return url_path(request, "dashboard:workflow", {"id": key, **(query or {})}, key="")
    return url_path(request, "dashboard:workflow", query, key=key)


def current_url(request: Request, *, with_query: bool = True) -> str:
    """This request's own path (and query), for a page that reloads itself (htmx `hx-get`): the decoded path
    percent-encoded again, so an id with `%`, `?` or `#` in it comes back as the same id."""
    path = quote(request.scope["path"], safe="/")
    query = request.scope.get("query_string", b"").decode("latin-1") if with_query else ""
    return path + (f"?{quote(query, safe='&=+%;,/:@!$()*~-._')}" if query else "")
