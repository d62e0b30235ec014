"""The timeline SVG is rendered by pure functions: spans from state history, open-ended running bars, marks."""

from __future__ import annotations

import datetime as dt

from tests.views.html import parse
from views.timeline import Mark, Row, render_timeline, state_group, state_spans

T0 = dt.datetime(2025, 3, 1, 8, 0, tzinfo=dt.UTC)


def at(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def test_state_history_becomes_spans_and_an_ended_state_a_terminal_mark() -> None:
    spans, terminal = state_spans(
        state="FAILED",
        start=at(1),
        end=at(30),
        created=at(0),
        history=[(at(0), "PENDING"), (at(1), "RUNNING"), (at(30), "FAILED")],
    )
    assert [(s.state, s.start, s.end) for s in spans] == [("PENDING", at(0), at(1)), ("RUNNING", at(1), at(30))]
    assert terminal == ("FAILED", at(30))


def test_running_attempt_without_history_is_one_open_span() -> None:
    spans, terminal = state_spans(state="RUNNING", start=at(5), end=None, created=at(4), history=[])
    assert [(s.state, s.start, s.end) for s in spans] == [("RUNNING", at(5), None)] and terminal is None


def test_row_state_newer_than_history_is_trusted() -> None:
    spans, terminal = state_spans(
        state="COMPLETED", start=at(1), end=at(9), created=at(0), history=[(at(1), "RUNNING")]
    )
    assert spans[-1].end == at(9) and terminal == ("COMPLETED", at(9))


def test_svg_draws_rows_spans_marks_with_utc_titles_and_an_open_end_at_now() -> None:
    failed = Row(
        "attempt 0",
        0,
        spans=[],
        marks=[Mark("anomaly", at(29), "CRASH xid: Xid 79"), Mark("checkpoint", at(20), "saved iteration 1200")],
    )
    failed.spans, failed.terminal = state_spans(
        state="FAILED", start=at(1), end=at(30), created=at(0), history=[(at(1), "RUNNING"), (at(30), "FAILED")]
    )
    failed.marks += [
        Mark("advice", at(30.1), "RESTART generation 1"),
        Mark("action", at(31), "requeue_hold SHADOW", end=at(31.5)),
        Mark("verification", at(33), "reconciliation.converged"),
    ]
    running = Row(
        "attempt 1",
        1,
        focus=True,
        spans=state_spans(state="RUNNING", start=at(35), end=None, created=at(34), history=[(at(35), "RUNNING")])[0],
    )
    svg = parse(str(render_timeline([failed, running], now=at(50))))
    root = svg.find("svg", class_="timeline")
    rows = root.find_all("g", class_="row")
    assert [r.attrs["data-attempt"] for r in rows] == ["0", "1"]
    assert "focus" in rows[1].attrs["class"].split()
    kinds = {m.attrs["class"].split()[1] for m in rows[0].find_all("g", class_="mark")}
    assert kinds == {"mark-anomaly", "mark-checkpoint", "mark-advice", "mark-action", "mark-verification"}
    # every span and mark explains itself on hover, in UTC, and carries data-utc for the local-time script
    for node in root.find_all("g", class_="mark") + root.find_all("g", class_="span"):
        assert node.find("title").text and "Z" in node.find("title").text and node.attrs["data-utc"].endswith("Z")
    open_span = rows[1].find("g", class_="open")
    assert "until now" in open_span.find("title").text and open_span.find_all("path", class_="open-arrow")
    assert "ended FAILED" in rows[0].find("g", class_="terminal").find("title").text
    assert root.find("g", class_="now").attrs["data-utc"] == "2025-03-01T08:50:00Z"


def test_open_span_grows_with_now() -> None:
    row = Row("attempt 0", 0, spans=state_spans(state="RUNNING", start=at(0), end=None, created=at(0), history=[])[0])

    def width(now: dt.datetime) -> tuple[float, float]:
        svg = parse(str(render_timeline([row], now=now)))
        return float(svg.find("g", class_="open").find("rect").attrs["x"] or 0), float(
            svg.find("g", class_="open").find("rect").attrs["width"] or 0
        )

    # the axis follows now, so the open bar always reaches (almost) the right edge
    x1, w1 = width(at(10))
    x2, w2 = width(at(120))
    assert w1 > 700 and w2 > 700 and x1 == x2


def test_text_is_escaped() -> None:
    row = Row("<b>x</b>", 0, marks=[Mark("anomaly", at(1), "<script>alert(1)</script>")], spans=[])
    markup = str(render_timeline([row], now=at(2)))
    assert "<script>" not in markup and "&lt;script&gt;" in markup and "<b>" not in markup


def test_state_groups() -> None:
    assert [
        state_group(s) for s in ("RUNNING", "PENDING", "FAILED", "NODE_FAIL", "COMPLETED", "CANCELLED", None, "WEIRD")
    ] == ["running", "pending", "failed", "failed", "completed", "cancelled", "other", "other"]
