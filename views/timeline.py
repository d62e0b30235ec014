"""Server-rendered SVG timeline of an attempt and its sibling attempts: pure functions, no I/O."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup, escape

from app.domain.control import states
from app.domain.edge.timefmt import iso_utc

MARK_KINDS = ("anomaly", "advice", "action", "shadow", "verification", "shadow-verification", "checkpoint")
MARK_LABELS = {
    "anomaly": "detection (anomaly)",
    "advice": "decision (Advice)",
    "action": "scheduler action",
    "verification": "verification (reconciliation)",
    "shadow": "observe only: action not run",
    "shadow-verification": "observe only: check, nothing was done",
    "checkpoint": "checkpoint",
}
# The same colours as the chips in static/dashboard.css (WCAG AA with white text: tests/views/test_contrast.py).
STATE_COLOURS = {
    "running": "#2563eb",
    "pending": "#5b6472",
    "completed": "#15803d",
    "failed": "#c81e1e",
    "cancelled": "#52525b",
    "other": "#57534e",
}
MARK_COLOURS = {
    "anomaly": "#dc2626",
    "advice": "#7c3aed",
    "action": "#ea580c",
    "verification": "#059669",
    "shadow": "#6d28d9",
    "shadow-verification": "#6d28d9",
    "checkpoint": "#0284c7",
}
TEXT_COLOURS = {"axis": "#4b5563", "label": "#1f2937", "link": "#1d4ed8", "silence": "#7c2d12"}
FOCUS_FILL = "#eef4ff"
SILENCE_FILL = "#f59e0b"
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
    anchor: str = ""  # id of its row in the events table (the mark links there)
    took_ms: float | None = None  # an action's own measured duration: the one Job Details shows too

    @property
    def took_seconds(self) -> float | None:
        """How long it took: the measured duration when recorded, else end minus start."""
        if self.took_ms is not None:
            return self.took_ms / 1000
        return (self.end - self.at).total_seconds() if self.end is not None else None


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
    silences: list[tuple[dt.datetime, dt.datetime, str]] = field(default_factory=list)  # a hang's silent window

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
        for start, end, _ in self.silences:
            yield start
            yield end

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


def duration_text(seconds: float | None) -> str:
    """A short human duration: 850ms, 42s, 5m 03s, 3h 12m, 2d 4h."""
    if seconds is None:
        return "—"
    if seconds < 0:  # an end before the start (an accounting line matched to the wrong run): never shown as time
        return "unknown (the recorded end is before the start)"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d {seconds % 86400 // 3600}h"


def _human(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d {seconds % 86400 // 3600}h"


def _text_w(text: str, size: float) -> float:
    """A generous estimate of a label's width (capitals are wide), so collision checks err on the safe side."""
    return len(text) * size * 0.68 + 2


def time_window(
    rows: Sequence[Row], *, now: dt.datetime, start: dt.datetime | None = None, end: dt.datetime | None = None
) -> tuple[dt.datetime, dt.datetime]:
    """The axis: `start`..`end` when given (a zoom), else every row's times (and now, while one runs) padded 3%."""
    if start is not None and end is not None and end > start:
        return start, end
    times = [t for row in rows for t in row.times()]
    if any(row.open_ended for row in rows) or not times:
        times.append(now)
    t0, t1 = min(times), max(times)
    if (t1 - t0).total_seconds() < 60:
        t1 = t0 + dt.timedelta(seconds=60)
    pad = (t1 - t0).total_seconds() * 0.03
    return t0 - dt.timedelta(seconds=pad), t1 + dt.timedelta(seconds=pad)


class _Lane:
    """Occupied x intervals of one line of text or marks; `place` refuses anything that would overlap."""

    def __init__(self) -> None:
        self.taken: list[tuple[float, float]] = []

    def free(self, x0: float, x1: float) -> bool:
        return all(x1 <= a or x0 >= b for a, b in self.taken)

    def place(self, x0: float, x1: float) -> bool:
        if not self.free(x0, x1):
            return False
        self.taken.append((x0, x1))
        return True


MARK_GAP = 18.0  # px between two marks of one lane (a mark is 12 px wide, its "+N" badge fits in between)
LANE_NAMES = {
    "anomaly": "detection",
    "advice": "decision",
    "action": "action",
    "verification": "verification",
    "checkpoint": "checkpoint",
    # observe mode's marks (what act mode would have done), when the kinds exist
    "shadow": "not run",
    "shadow-verification": "check only",
}


def spread_marks(marks: Sequence[Mark], x: Any) -> list[tuple[int, list[Mark]]]:
    """Marks in one lane per kind present (so different kinds never cover each other): (lane, group).

    Within a lane, marks within MARK_GAP of a group's first mark (or inside a span of the group) form one group drawn
    once with a "+N" count. Measured from the first mark, not the previous one: a steady run of checkpoints is
    never chained into a single mark spanning minutes."""
    kinds = [k for k in MARK_KINDS if any(m.kind == k for m in marks)]
    kinds += sorted({m.kind for m in marks} - set(kinds))
    placed: list[tuple[int, list[Mark]]] = []
    for lane, kind in enumerate(kinds):
        first_x: float | None = None
        last_right: float | None = None
        for mark in sorted((m for m in marks if m.kind == kind), key=lambda m: m.at):
            mx = x(mark.at)
            right = max(mx, x(mark.end)) if mark.end is not None else mx
            if first_x is not None and last_right is not None and (mx - first_x < MARK_GAP or mx < last_right):
                placed[-1][1].append(mark)
                last_right = max(last_right, right)
                continue
            placed.append((lane, [mark]))
            first_x = mx
            last_right = right
    return placed


def render_timeline(
    rows: Sequence[Row],
    *,
    now: dt.datetime,
    width: int = 1200,
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
) -> Markup:
    """The SVG of the rows on one UTC time axis (optionally zoomed to start..end); running spans reach `now`.

    Labels never overlap: span text is drawn inside its bar only when it fits, end labels get their own line and
    give way to one another, simultaneous marks spread over lanes (or group with a count). Marks are links to
    their event rows (`#ev-N`), focusable with the keyboard."""
    label_w, right_pad, top, axis_h = 120, 16, 8, 28
    t0, t1 = time_window(rows, now=now, start=start, end=end)
    total = (t1 - t0).total_seconds()
    plot_w = width - label_w - right_pad
    left, right = float(label_w), float(width - right_pad)

    def x(at: dt.datetime) -> float:
        return round(min(max(label_w + (at - t0).total_seconds() / total * plot_w, left - 4), right + 4), 1)

    def inside(at: dt.datetime) -> bool:
        return t0 <= at <= t1

    body: list[str] = []
    y = top + axis_h
    for row in rows:
        placed = spread_marks([m for m in row.marks if inside(m.at) or (m.end and inside(m.end))], x)
        lanes = max([lane for lane, _ in placed], default=-1) + 1
        row_h = 38 + max(lanes, 1) * 16
        body.append(_row_svg(row, y=y, row_h=row_h, width=width, x=x, now=now, t0=t0, t1=t1, placed=placed))
        y += row_h
    height = y + 8
    out: list[str] = [
        f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="100%" role="group" aria-label="Timeline of {len(rows)} attempt(s), times in UTC, '
        f'{_fmt(t0)} to {_fmt(t1)}" data-start="{iso_utc(t0)}" data-end="{iso_utc(t1)}">',
        '<defs><pattern id="silence-hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="3" height="6" fill="' + SILENCE_FILL + '" fill-opacity=".55"/>'
        "</pattern></defs>",
    ]
    # Axis with UTC ticks; a tick label that would touch its neighbour is left out.
    step = _nice_step(total)
    first = math.ceil(t0.timestamp() / step) * step
    tick_fmt = "%H:%M:%S" if step < 60 else "%H:%M"
    if total > 2 * 86400:
        tick_fmt = "%m-%d %H:%M"
    axis_y = top + axis_h - 6
    out.append(f'<line class="axis" x1="{label_w}" y1="{axis_y}" x2="{right}" y2="{axis_y}" stroke="#8a94a6"/>')
    out.append(
        f'<text class="axis-label" x="4" y="{axis_y - 6}" font-size="12" fill="{TEXT_COLOURS["axis"]}">UTC</text>'
    )
    ticks = _Lane()
    tick = first
    while tick <= t1.timestamp():
        at = dt.datetime.fromtimestamp(tick, dt.UTC)
        tx = x(at)
        text = at.strftime(tick_fmt)
        half = _text_w(text, 12) / 2
        out.append(f'<line class="grid" x1="{tx}" y1="{axis_y}" x2="{tx}" y2="{height - 4}" stroke="#e3e7ee"/>')
        if ticks.place(tx - half - 4, tx + half + 4):
            out.append(
                f'<g class="tick" data-utc="{iso_utc(at)}"><title>{_fmt(at)}</title>'
                f'<text x="{tx}" y="{axis_y - 6}" font-size="12" text-anchor="middle" '
                f'fill="{TEXT_COLOURS["axis"]}">{text}</text></g>'
            )
        tick += step
    if inside(now):
        now_x = x(now)
        out.append(
            f'<g class="now" data-utc="{iso_utc(now)}"><title>now {_fmt(now)}</title>'
            f'<line x1="{now_x}" y1="{axis_y}" x2="{now_x}" y2="{height - 4}" stroke="#c2410c" '
            f'stroke-dasharray="3 3"/></g>'
        )
    out += body
    out.append("</svg>")
    return Markup("".join(out))


def _row_svg(
    row: Row,
    *,
    y: float,
    row_h: float,
    width: int,
    x: Any,
    now: dt.datetime,
    t0: dt.datetime,
    t1: dt.datetime,
    placed: list[tuple[int, list[Mark]]],
) -> str:
    out = [f'<g class="row{" focus" if row.focus else ""}" data-attempt="{row.attempt_index}">']
    if row.focus:
        out.append(f'<rect class="row-focus" x="0" y="{y}" width="{width}" height="{row_h}" fill="{FOCUS_FILL}"/>')
    label = escape(row.label)
    if row.href:
        out.append(
            f'<a href="{escape(row.href)}"><text x="6" y="{y + 28}" font-size="13" '
            f'fill="{TEXT_COLOURS["link"]}">{label}</text></a>'
        )
    else:
        out.append(f'<text x="6" y="{y + 28}" font-size="13" fill="{TEXT_COLOURS["label"]}">{label}</text>')
    label_lane = _Lane()  # one line above the bar: silence and end labels
    text_y, bar_y, bar_h = y + 12, y + 16, 16
    for start, end, what in row.silences:
        if end < t0 or start > t1:
            continue
        sx, ex = x(max(start, t0)), x(min(end, t1))
        secs = (end - start).total_seconds()
        text = f"silent {_human(secs)}"
        out.append(
            f'<g class="silence" data-utc="{iso_utc(start)}"><title>{escape(what)}: no output from {_fmt(start)} '
            f"to {_fmt(end)} ({_human(secs)})</title>"
            f'<rect x="{sx}" y="{bar_y - 2}" width="{round(max(ex - sx, 2), 1)}" height="{bar_h + 4}" '
            f'fill="url(#silence-hatch)" stroke="{SILENCE_FILL}" stroke-width="1"/>'
        )
        w = _text_w(text, 11)
        if ex - sx >= w and label_lane.place(sx, sx + w):
            out.append(
                f'<text class="silence-label" x="{sx}" y="{text_y}" font-size="11" '
                f'fill="{TEXT_COLOURS["silence"]}">{text}</text>'
            )
        out.append("</g>")
    for span in row.spans:
        span_end = span.end or now
        if span_end < t0 or span.start > t1:
            continue
        sx = x(max(span.start, t0))
        ex = x(min(span_end, t1))
        w = max(ex - sx, 2)
        until = "now (still " + span.state + ")" if span.end is None else _fmt(span.end)
        secs = (span_end - span.start).total_seconds()
        colour = STATE_COLOURS[state_group(span.state)]
        out.append(
            f'<g class="span state-{state_group(span.state)}{" open" if span.end is None else ""}" '
            f'data-utc="{iso_utc(span.start)}">'
            f"<title>{escape(span.state)} from {_fmt(span.start)} until {escape(until)} ({_human(secs)})</title>"
            f'<rect x="{sx}" y="{bar_y}" width="{round(w, 1)}" height="{bar_h}" rx="2" fill="{colour}"/>'
        )
        if span.end is None and span_end <= t1:  # an arrow head says "still going"
            out.append(
                f'<path class="open-arrow" d="M{ex} {bar_y - 2} L{ex + 7} {bar_y + bar_h / 2} '
                f'L{ex} {bar_y + bar_h + 2} Z" fill="{colour}"/>'
            )
        # The state and its duration inside the bar, as much as fits (the title always has all of it).
        for text in (f"{span.state} · {_human(secs)}", span.state, _human(secs)):
            if _text_w(text, 11) + 8 <= w:
                out.append(
                    f'<text class="span-label" x="{sx + 4}" y="{bar_y + 12}" font-size="11" '
                    f'fill="#fff">{escape(text)}</text>'
                )
                break
        out.append("</g>")
    if row.terminal and t0 <= row.terminal[1] <= t1:
        state, at = row.terminal
        tx = x(at)
        colour = STATE_COLOURS[state_group(state)]
        out.append(
            f'<g class="terminal state-{state_group(state)}" data-utc="{iso_utc(at)}">'
            f"<title>ended {escape(state)} at {_fmt(at)}</title>"
            f'<rect x="{tx - 2}" y="{bar_y - 3}" width="4" height="{bar_h + 6}" fill="{colour}"/>'
        )
        w = _text_w(state, 11)
        # Right of the mark if it fits in the picture and the label line, else left of it, else only the title.
        for x0, anchor in ((tx + 5, "start"), (tx - 5 - w, "end")):
            if x0 >= 120 and x0 + w <= width - 4 and label_lane.place(x0, x0 + w):
                tx_text = x0 if anchor == "start" else x0 + w
                out.append(
                    f'<text class="terminal-label" x="{round(tx_text, 1)}" y="{text_y}" font-size="11" '
                    f'text-anchor="{anchor}" fill="{colour}">{escape(state)}</text>'
                )
                break
        out.append("</g>")
    # A group's "+N" goes right of its mark only where it touches neither a mark nor another count of its lane;
    # otherwise the mark gets a dark outline instead (its title lists every event of the group).
    lanes: dict[int, _Lane] = {}
    for lane, group in placed:
        mx = x(group[0].at)
        lanes.setdefault(lane, _Lane()).place(mx - 7, max(mx, x(group[0].end) if group[0].end else mx) + 7)
    counts: set[int] = set()
    for n, (lane, group) in enumerate(placed):
        if len(group) > 1:
            mx = x(group[0].at)
            w = _text_w(f"+{len(group) - 1}", 10)
            if mx + 7 + w <= width - 4 and lanes[lane].place(mx + 7, mx + 7 + w):
                counts.add(n)
    named: set[int] = set()
    for n, (lane, group) in enumerate(placed):
        if lane not in named:
            named.add(lane)
            out.append(
                f'<text class="lane-label" x="18" y="{y + 50 + lane * 16}" font-size="11" '
                f'fill="{TEXT_COLOURS["axis"]}">{LANE_NAMES.get(group[0].kind, escape(group[0].kind))}</text>'
            )
        out.append(_mark_svg(group[0], x, y + 46 + lane * 16, extra=group[1:], count=n in counts))
    out.append("</g>")
    return "".join(out)


def _mark_svg(mark: Mark, x: Any, y: float, extra: Sequence[Mark] = (), count: bool = True) -> str:
    mx = x(mark.at)
    title = f"{MARK_LABELS.get(mark.kind, mark.kind)} at {_fmt(mark.at)}: {mark.label}"
    if mark.took_seconds is not None:
        title += f" (took {duration_text(mark.took_seconds)})"  # the words Job Details uses
    for other in extra:
        title += f"; {MARK_LABELS.get(other.kind, other.kind)} at {_fmt(other.at)}: {other.label}"
    outline = ' stroke="#111827" stroke-width="1.5"' if extra and not count else ""
    head = (
        f'<g class="mark mark-{mark.kind}" fill="{MARK_COLOURS.get(mark.kind, "#374151")}"{outline} '
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
    elif mark.kind == "shadow":  # hollow, dashed: what observe mode would have sent, never a filled action bar
        shape = (
            f'<rect x="{mx - 5}" y="{y - 4}" width="10" height="8" fill="none" stroke="#6d28d9" '
            f'stroke-dasharray="2 1.5" stroke-width="1.5"/>'
        )
    elif mark.kind == "shadow-verification":  # a hollow ring: no tick, nothing was verified as done
        shape = f'<circle cx="{mx}" cy="{y}" r="4.5" fill="none" stroke="#6d28d9" stroke-width="1.5"/>'
    else:  # checkpoint
        shape = f'<rect x="{mx - 4}" y="{y - 4}" width="8" height="8" rx="1"/>'
    if extra and count:
        shape += (
            f'<text class="mark-count" x="{mx + 7}" y="{y - 3}" font-size="10" '
            f'fill="{TEXT_COLOURS["label"]}">+{len(extra)}</text>'
        )
    svg = head + shape + "</g>"
    if mark.anchor:
        svg = f'<a class="mark-link" href="#{escape(mark.anchor)}" tabindex="0" aria-label="{escape(title)}">{svg}</a>'
    return svg


def legend_items() -> list[tuple[str, str]]:
    """(kind, label) pairs for the legend under the SVG."""
    return [(kind, MARK_LABELS[kind]) for kind in MARK_KINDS]
