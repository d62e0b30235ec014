"""Server-rendered SVG timeline of an attempt and its sibling attempts: pure functions, no I/O."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup, escape

from app.domain import states
from app.domain.timefmt import iso_utc

MARK_KINDS = ("anomaly", "advice", "action", "verification", "checkpoint")
MARK_LABELS = {
    "anomaly": "detection (anomaly)",
    "advice": "decision (Advice)",
    "action": "scheduler action",
    "verification": "verification (reconciliation)",
    "checkpoint": "checkpoint",
}
STATE_COLOURS = {
    "running": "#2563eb",
    "pending": "#a3acb9",
    "completed": "#16a34a",
    "failed": "#dc2626",
    "cancelled": "#6b7280",
    "other": "#9ca3af",
}
MARK_COLOURS = {
    "anomaly": "#dc2626",
    "advice": "#7c3aed",
    "action": "#ea580c",
    "verification": "#059669",
    "checkpoint": "#0284c7",
}
_NICE_STEPS = (
    1,
    2,
    5,
    10,
    15,
    30,
    60,
    120,
    300,
    600,
    900,
    1800,
    3600,
    7200,
    10800,
    21600,
    43200,
    86400,
    172800,
    604800,
)


def state_group(state: str | None) -> str:
    """Colour group of a Slurm state: running, pending, completed, failed, cancelled or other."""
    if not state:
        return "other"
    if state in states.EXECUTING:
        return "running"
    if state in states.FAILED:
        return "failed"
    if state == "COMPLETED":
        return "completed"
    if state == "CANCELLED":
        return "cancelled"
    if state in states.ACTIVE or state == "REQUEUED":
        return "pending"
    return "other"


@dataclass(frozen=True)
class Span:
    """A scheduler state held from `start` until `end` (None: still held now)."""

    state: str
    start: dt.datetime
    end: dt.datetime | None


@dataclass(frozen=True)
class Mark:
    """A point event on a row (an action may also have an end)."""

    kind: str
    at: dt.datetime
    label: str
    end: dt.datetime | None = None


@dataclass
class Row:
    """One attempt: its state spans and marks; `focus` is the attempt the page is about."""

    label: str
    attempt_index: int
    focus: bool = False
    href: str | None = None
    spans: list[Span] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    terminal: tuple[str, dt.datetime] | None = None  # the ended state and when it ended

    def times(self) -> Iterable[dt.datetime]:
        for span in self.spans:
            yield span.start
            if span.end:
                yield span.end
        for mark in self.marks:
            yield mark.at
            if mark.end:
                yield mark.end
        if self.terminal:
            yield self.terminal[1]

    @property
    def open_ended(self) -> bool:
        return any(span.end is None for span in self.spans)


def state_spans(
    *,
    state: str,
    start: dt.datetime | None,
    end: dt.datetime | None,
    created: dt.datetime,
    history: Sequence[tuple[dt.datetime, str]],
) -> tuple[list[Span], tuple[str, dt.datetime] | None]:
    """Spans from an attempt's recorded state changes (time, new state); ended states become a terminal mark."""
    changes = sorted(history, key=lambda item: item[0])
    if not changes:
        changes = [(start or created, state)]
    if changes[-1][1] != state:
        # The row changed after the last event we have (or events were filtered): trust the row.
        changes.append((end or changes[-1][0], state))
    spans: list[Span] = []
    terminal: tuple[str, dt.datetime] | None = None
    for i, (at, value) in enumerate(changes):
        following = changes[i + 1][0] if i + 1 < len(changes) else None
        last = following is None
        if last and value not in states.ACTIVE:
            terminal = (value, end or at)
            continue
        span_end = following if not last else None
        if span_end is not None and span_end < at:
            span_end = at
        spans.append(Span(value, at, span_end))
    return spans, terminal


def _nice_step(seconds: float, target_ticks: int = 7) -> int:
    raw = seconds / max(target_ticks, 1)
    for step in _NICE_STEPS:
        if step >= raw:
            return step
    return _NICE_STEPS[-1] * math.ceil(raw / _NICE_STEPS[-1])


def _fmt(at: dt.datetime) -> str:
    return at.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _human(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"


def render_timeline(rows: Sequence[Row], *, now: dt.datetime, width: int = 1200) -> Markup:
    """The SVG of the rows on one UTC time axis; running spans reach `now` and are drawn open-ended."""
    label_w, right_pad, top, row_h, axis_h = 120, 16, 8, 40, 26
    height = top + axis_h + max(len(rows), 1) * row_h + 8
    times = [t for row in rows for t in row.times()]
    if any(row.open_ended for row in rows) or not times:
        times.append(now)
    t0, t1 = min(times), max(times)
    if (t1 - t0).total_seconds() < 60:
        t1 = t0 + dt.timedelta(seconds=60)
    pad = (t1 - t0).total_seconds() * 0.03
    t0, t1 = t0 - dt.timedelta(seconds=pad), t1 + dt.timedelta(seconds=pad)
    total = (t1 - t0).total_seconds()
    plot_w = width - label_w - right_pad

    def x(at: dt.datetime) -> float:
        return round(label_w + (at - t0).total_seconds() / total * plot_w, 1)

    out: list[str] = [
        f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="100%" role="img" aria-label="Timeline of {len(rows)} attempt(s), times in UTC" '
        f'data-start="{iso_utc(t0)}" data-end="{iso_utc(t1)}">'
    ]
    # Axis with UTC ticks.
    step = _nice_step(total)
    first = math.ceil(t0.timestamp() / step) * step
    tick_fmt = "%H:%M:%S" if step < 60 else "%H:%M"
    if total > 2 * 86400:
        tick_fmt = "%m-%d %H:%M"
    axis_y = top + axis_h - 6
    out.append(
        f'<line class="axis" x1="{label_w}" y1="{axis_y}" x2="{width - right_pad}" y2="{axis_y}" stroke="#8a94a6"/>'
    )
    out.append(f'<text class="axis-label" x="4" y="{axis_y - 6}" font-size="11" fill="#5b6475">UTC</text>')
    tick = first
    while tick <= t1.timestamp():
        at = dt.datetime.fromtimestamp(tick, dt.UTC)
        tx = x(at)
        out.append(f'<line class="grid" x1="{tx}" y1="{axis_y}" x2="{tx}" y2="{height - 4}" stroke="#e3e7ee"/>')
        out.append(
            f'<g class="tick" data-utc="{iso_utc(at)}"><title>{_fmt(at)}</title>'
            f'<text x="{tx}" y="{axis_y - 6}" font-size="11" text-anchor="middle" '
            f'fill="#5b6475">{at.strftime(tick_fmt)}</text></g>'
        )
        tick += step
    now_x = x(now) if t0 <= now <= t1 else None
    if now_x is not None:
        out.append(
            f'<g class="now" data-utc="{iso_utc(now)}"><title>now {_fmt(now)}</title>'
            f'<line x1="{now_x}" y1="{axis_y}" x2="{now_x}" y2="{height - 4}" stroke="#c2410c" '
            f'stroke-dasharray="3 3"/></g>'
        )
    for i, row in enumerate(rows):
        y = top + axis_h + i * row_h
        out.append(f'<g class="row{" focus" if row.focus else ""}" data-attempt="{row.attempt_index}">')
        if row.focus:
            out.append(f'<rect class="row-focus" x="0" y="{y}" width="{width}" height="{row_h}" fill="#eef4ff"/>')
        label = escape(row.label)
        if row.href:
            out.append(
                f'<a href="{escape(row.href)}"><text x="6" y="{y + 16}" font-size="12" '
                f'fill="#1d4ed8">{label}</text></a>'
            )
        else:
            out.append(f'<text x="6" y="{y + 16}" font-size="12" fill="#1f2937">{label}</text>')
        bar_y, bar_h = y + 6, 14
        for span in row.spans:
            sx = x(span.start)
            ex = x(span.end or now)
            w = max(ex - sx, 2)
            until = "now (still " + span.state + ")" if span.end is None else _fmt(span.end)
            secs = ((span.end or now) - span.start).total_seconds()
            out.append(
                f'<g class="span '
                f'state-{state_group(span.state)}{" open" if span.end is None else ""}" '
                f'data-utc="{iso_utc(span.start)}">'
                f"<title>{escape(span.state)} from {_fmt(span.start)} until {escape(until)} ({_human(secs)})</title>"
                f'<rect x="{sx}" y="{bar_y}" width="{round(w, 1)}" height="{bar_h}" rx="2" '
                f'fill="{STATE_COLOURS[state_group(span.state)]}"/>'
            )
            if span.end is None:  # an arrow head says "still going"
                out.append(
                    f'<path class="open-arrow" d="M{ex} {bar_y - 2} L{ex + 7} {bar_y + bar_h / 2} '
                    f'L{ex} {bar_y + bar_h + 2} Z" '
                    f'fill="{STATE_COLOURS[state_group(span.state)]}"/>'
                )
            if w > 60:
                out.append(
                    f'<text class="span-label" x="{sx + 4}" y="{bar_y + 11}" font-size="10" '
                    f'fill="#fff">{escape(span.state)}</text>'
                )
            out.append("</g>")
        if row.terminal:
            state, at = row.terminal
            tx = x(at)
            out.append(
                f'<g class="terminal state-{state_group(state)}" '
                f'data-utc="{iso_utc(at)}"><title>ended {escape(state)} at {_fmt(at)}</title>'
                f'<rect x="{tx - 2}" y="{bar_y - 3}" width="4" height="{bar_h + 6}" '
                f'fill="{STATE_COLOURS[state_group(state)]}"/>'
                # Near the right edge the label goes to the left of the mark so it stays inside the picture.
                + (f'<text x="{tx - 5}" text-anchor="end"' if tx > width - right_pad - 70 else f'<text x="{tx + 5}"')
                + f' y="{bar_y + 11}" font-size="10" class="terminal-label" '
                f'fill="{STATE_COLOURS[state_group(state)]}">{escape(state)}</text></g>'
            )
        mark_y = y + 30
        for mark in sorted(row.marks, key=lambda m: m.at):
            out.append(_mark_svg(mark, x, mark_y))
        out.append("</g>")
    out.append("</svg>")
    return Markup("".join(out))


def _mark_svg(mark: Mark, x: Any, y: float) -> str:
    mx = x(mark.at)
    title = f"{MARK_LABELS.get(mark.kind, mark.kind)} at {_fmt(mark.at)}: {mark.label}"
    if mark.end is not None:
        title += f" (took {_human((mark.end - mark.at).total_seconds())})"
    head = (
        f'<g class="mark mark-{mark.kind}" fill="{MARK_COLOURS.get(mark.kind, "#374151")}" '
        f'data-utc="{iso_utc(mark.at)}"><title>{escape(title)}</title>'
    )
    if mark.kind == "anomaly":
        shape = f'<path d="M{mx} {y - 6} L{mx + 6} {y + 5} L{mx - 6} {y + 5} Z"/>'
    elif mark.kind == "advice":
        shape = f'<path d="M{mx} {y - 6} L{mx + 6} {y} L{mx} {y + 6} L{mx - 6} {y} Z"/>'
    elif mark.kind == "action":
        end_x = x(mark.end) if mark.end is not None else mx
        shape = f'<rect x="{mx}" y="{y - 4}" width="{round(max(end_x - mx, 4), 1)}" height="8"/>'
    elif mark.kind == "verification":
        shape = (
            f'<circle cx="{mx}" cy="{y}" r="5"/><path d="M{mx - 3} {y} L{mx - 1} {y + 2} '
            f'L{mx + 3} {y - 2}" fill="none" stroke="#fff" stroke-width="1.5"/>'
        )
    else:  # checkpoint
        shape = f'<rect x="{mx - 4}" y="{y - 4}" width="8" height="8" rx="1"/>'
    return head + shape + "</g>"


def legend_items() -> list[tuple[str, str]]:
    """(kind, label) pairs for the legend under the SVG."""
    return [(kind, MARK_LABELS[kind]) for kind in MARK_KINDS]
