"""The dashboard's Jinja2 environment: URL helper that honours the root path, time and JSON filters."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

from jinja2 import pass_context
from markupsafe import Markup, escape
from starlette.templating import Jinja2Templates

from app.domain.edge.timefmt import iso_utc
from app.domain.presentation import glossary
from app.domain.presentation.story import shown_reason
from app.infra.resources import resource_dir
from views.timeline import duration_text, state_group
from views.urls import url_path, url_segment, workflow_path

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
STATIC_DIR = resource_dir("static")
# Vendored from the npm registry (`npm pack htmx.org@2.0.11 htmx-ext-sse@2.2.4`); see static/VENDORED.md.
HTMX_FILE = "htmx-2.0.11.min.js"
HTMX_SSE_FILE = "htmx-ext-sse-2.2.4.min.js"


@pass_context
def _url(context: Any, name: str, query: dict[str, Any] | None = None, **params: Any) -> str:
    return url_path(context["request"], name, query, **params)


@pass_context
def _workflow_url(context: Any, key: str, query: dict[str, Any] | None = None) -> str:
    return workflow_path(context["request"], key, query)


@pass_context
def _static(context: Any, filename: str) -> str:
    # Our own file names (with their folder): not an id, so the `/` between folder and name stays.
    return context["request"].url_for("static", path=filename).path


def utc_text(value: dt.datetime | None, *, seconds: bool = True) -> str:
    """`2025-01-31 12:00:05Z`: every time on the dashboard is UTC; local time is shown on hover."""
    if value is None:
        return "—"
    value = value.astimezone(dt.UTC)
    return value.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M") + "Z"


def iso(value: dt.datetime | None) -> str:
    """ISO 8601 in UTC (for `<time datetime>` and data attributes)."""
    return iso_utc(value) if value is not None else ""


def time_tag(value: dt.datetime | None) -> Markup:
    """A `<time>` element in UTC; static/dashboard.js adds the reader's local time as its tooltip."""
    if value is None:
        return Markup('<span class="muted">—</span>')
    return Markup('<time datetime="{}">{}</time>').format(iso(value), utc_text(value))


def pretty_json(value: Any) -> str:
    """Indented JSON for the raw views (datetimes as ISO text)."""
    return json.dumps(
        value, indent=2, sort_keys=True, default=lambda v: iso(v) if isinstance(v, dt.datetime) else str(v)
    )


def state_class(state: str | None) -> str:
    """CSS class of a scheduler state badge."""
    return "state state-" + state_group(state)


def tip_id(term: str) -> str:
    """The id of a term's description in the page's glossary block (base.html)."""
    return "tip-" + re.sub(r"[^A-Za-z0-9]+", "-", term).strip("-")


def gloss(term: str, text: str | None = None) -> Markup:
    """`term` (or `text`) as a focusable button described by the term's glossary entry (hover, focus and tap show it).

    The description lives once per page in base.html (so table text stays clean); CSS shows `data-tip`."""
    found = glossary.BY_NAME.get(term)
    shown = term if text is None else text
    if found is None:
        return Markup("{}").format(shown)
    return Markup(
        '<button type="button" class="gloss-term" aria-describedby="{tip}" '
        'data-tip="{plain}: {meaning}">{shown}</button>'
    ).format(tip=tip_id(term), shown=shown, plain=found.plain, meaning=found.meaning)


# Terms found inside free text (reasons, messages): the jargon only, not everyday words such as "attempt".
_JARGON = re.compile(
    r"\b("
    + "|".join(re.escape(t.term) for t in sorted(glossary.TERMS, key=lambda t: -len(t.term)) if not t.term.islower())
    + r")\b"
)


def glossed(text: str | None) -> Markup:
    """Free text (escaped) with the first mention of each glossary term made a tooltip button."""
    if not text:
        return Markup("")
    done: set[str] = set()

    def swap(match: re.Match[str]) -> str:
        term = match.group(1)
        if term in done:
            return term
        done.add(term)
        return str(gloss(term))

    return Markup(_JARGON.sub(swap, str(escape(text))))


def exit_words(code: int | None, signal: int | None = None) -> str:
    """Exit code and signal in plain words (137: killed by SIGKILL)."""
    return glossary.exit_text(code, signal)


STATE_ICONS = {"running": "▶", "pending": "…", "completed": "✓", "failed": "✗", "cancelled": "■", "other": "?"}


def state_icon(state: str | None) -> str:
    """A symbol per state group, so a state is never told by colour alone."""
    return STATE_ICONS[state_group(state)]


def disposition_class(advice: Any) -> str:
    """The colour of an Advice's reconciliation by what a person must do, not by the controller's bookkeeping.

    Observe-only never looks like waiting (nothing can act on it); a run Recovery stopped (TERMINATE, vetoed,
    abandoned) is not a green success even when its TERMINATE converged: its user must resubmit.
    """
    if advice.mode == "observe":
        return "disp disp-observe"
    if advice.operation == "TERMINATE" or advice.review == "VETOED" or advice.disposition == "ABANDONED":
        return "disp disp-stopped"
    return f"disp disp-{str(advice.disposition).lower()}"


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def build_templates() -> Jinja2Templates:
    """The template set of the dashboard (autoescaped; helpers as globals)."""
    templates = Jinja2Templates(directory=str(TEMPLATES_DIR))
    env = templates.env
    env.globals.update(
        url=_url,
        workflow_url=_workflow_url,
        static=_static,
        now_utc=_now,
        htmx_file=HTMX_FILE,
        htmx_sse_file=HTMX_SSE_FILE,
        gloss=gloss,
        glossary_terms=glossary.TERMS,
        tip_id=tip_id,
    )
    env.filters.update(
        utc=utc_text,
        iso=iso,
        time=time_tag,
        duration=duration_text,
        pretty_json=pretty_json,
        state_class=state_class,
        exit_words=exit_words,
        state_icon=state_icon,
        glossed=glossed,
        shown_reason=shown_reason,
        disposition_class=disposition_class,
        urlsegment=url_segment,
    )
    env.trim_blocks = True
    env.lstrip_blocks = True
    return templates
