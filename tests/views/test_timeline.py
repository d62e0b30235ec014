"""The timeline SVG is rendered by pure functions: spans from state history, open-ended running bars, marks."""

from __future__ import annotations

import datetime as dt

from tests.views.html import parse
from views.timeline import (
    MARK_GAP,
    Mark,
    Row,
    duration_text,
    render_timeline,
    spread_marks,
    state_group,
    state_spans,
)

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


def _boxes(row) -> list[tuple[float, float, float, str]]:
    """(x0, x1, baseline, text) of every text of a row, from the renderer's own generous width estimate."""
    from views.timeline import _text_w

    out = []
    for node in row.find_all("text"):
        size = float(node.attrs.get("font-size", 11))
        width = _text_w(node.text, size)
        x0 = float(node.attrs["x"])
        anchor = node.attrs.get("text-anchor", "start")
        x0 -= width if anchor == "end" else width / 2 if anchor == "middle" else 0
        out.append((x0, x0 + width, float(node.attrs["y"]), node.text))
    return out


def test_simultaneous_marks_spread_labels_never_overlap_and_marks_link_to_events() -> None:
    from views.timeline import spread_marks

    # Three attempts ending within seconds of each other near the right edge: the "OMPLETED".
    rows = []
    for i in range(3):
        row = Row(f"attempt {i}", i)
        row.spans, row.terminal = state_spans(
            state="COMPLETED" if i else "OUT_OF_MEMORY",
            start=at(i * 0.1),
            end=at(60 - i * 0.01),
            created=at(0),
            history=[(at(i * 0.1), "RUNNING")],
        )
        row.marks = [
            Mark(kind, at(59.99), f"{kind} {n}", anchor=f"ev-{i}-{n}")
            for n, kind in enumerate(("anomaly", "advice", "action", "verification", "checkpoint", "checkpoint"))
        ]
        rows.append(row)
    svg = parse(str(render_timeline(rows, now=at(61))))
    for drawn in svg.find_all("g", class_="row"):
        boxes = _boxes(drawn)
        for a in boxes:
            for b in boxes:
                if a is not b and a[2] == b[2]:
                    assert a[1] <= b[0] or b[1] <= a[0], (a, b)
            assert a[0] >= 0 and a[1] <= 1200, a
        links = drawn.find_all("a", class_="mark-link")
        # five kinds in five lanes; the two checkpoints at the same moment become one mark "+1"
        assert len(links) == 5 and any(t.text == "+1" for t in drawn.find_all("text", class_="mark-count"))
        assert all(a.attrs["href"].startswith("#ev-") and a.attrs["tabindex"] == "0" for a in links)
    # spread_marks: one lane per kind, same-kind neighbours grouped
    marks = rows[0].marks
    placed = spread_marks(marks, lambda t: 600.0)
    assert sorted(lane for lane, _ in placed) == [0, 1, 2, 3, 4] and max(len(g) for _, g in placed) == 2


def test_bars_carry_state_and_duration_only_when_they_fit_and_silence_is_shaded() -> None:
    row = Row("attempt 0", 0, silences=[(at(20), at(35), "NO_PROGRESS")])
    row.spans, row.terminal = state_spans(
        state="FAILED", start=at(0), end=at(40), created=at(0), history=[(at(0), "PENDING"), (at(0.2), "RUNNING")]
    )
    svg = parse(str(render_timeline([row], now=at(41))))
    labels = [t.text for t in svg.find_all("text", class_="span-label")]
    assert labels == ["RUNNING · 39m 48s"]  # the 12-second PENDING bar is too narrow for any text
    silence = svg.find("g", class_="silence")
    assert "15m 00s" in silence.find("title").text and svg.find("text", class_="silence-label").text == "silent 15m 00s"


def test_zoomed_window_clips_what_is_outside() -> None:
    row = Row("attempt 0", 0, marks=[Mark("anomaly", at(5), "early"), Mark("advice", at(50), "late")])
    row.spans, row.terminal = state_spans(state="FAILED", start=at(0), end=at(55), created=at(0), history=[])
    svg = parse(str(render_timeline([row], now=at(60), start=at(40), end=at(60))))
    assert [g.attrs["class"] for g in svg.find_all("g", class_="mark")] == ["mark mark-advice"]
    assert svg.find("svg").attrs["data-start"] == "2025-03-01T08:40:00Z"


def test_crowded_groups_drop_their_count_for_an_outline() -> None:
    # 40 checkpoints in pairs 24 s apart (~20 px at this scale): groups 18+ px apart, "+1" would touch the next mark
    marks = [Mark("checkpoint", at((n // 2) * 0.4 + (n % 2) * 0.01), f"saved {n}") for n in range(40)]
    row = Row("attempt 0", 0, marks=marks)
    row.spans, row.terminal = state_spans(state="COMPLETED", start=at(0), end=at(20), created=at(0), history=[])
    svg = parse(str(render_timeline([row], now=at(21))))
    drawn = svg.find("g", class_="row")
    boxes = _boxes(drawn)
    shapes = [float(r.attrs["x"]) for r in drawn.find_all("rect") if r.attrs.get("width") == "8"]
    for x0, x1, _, text in boxes:
        if text.startswith("+"):
            assert all(x1 <= s or x0 >= s + 8 for s in shapes), (text, x0, x1)
    outlined = [g for g in drawn.find_all("g", class_="mark") if g.attrs.get("stroke")]
    assert outlined and len(outlined) + len([b for b in boxes if b[3].startswith("+")]) == len(
        drawn.find_all("g", class_="mark")
    )


def test_a_steady_run_of_checkpoints_is_never_chained_into_one_mark() -> None:
    """180 checkpoints over 8 minutes on a 1,080 px axis (6 px apart): groups stay within MARK_GAP of their first
    mark, so marks minutes apart are never drawn as one "+179" (issue 26)."""

    start = dt.datetime(2025, 3, 1, 8, 0, tzinfo=dt.UTC)
    marks = [Mark("checkpoint", start + dt.timedelta(seconds=480 * n / 179), f"iteration {n}") for n in range(180)]

    def x(at: dt.datetime) -> float:
        return (at - start).total_seconds() / 480 * 1080

    groups = spread_marks(marks, x)
    assert len(groups) >= 1080 / MARK_GAP - 2
    for _, group in groups:
        assert x(group[-1].at) - x(group[0].at) < MARK_GAP
    assert sum(len(g) for _, g in groups) == 180


def test_an_actions_duration_comes_from_its_measured_time_like_on_job_details() -> None:
    start = dt.datetime(2025, 3, 1, 8, 0, tzinfo=dt.UTC)
    mark = Mark("action", start, "requeue_hold SUCCEEDED", end=start + dt.timedelta(milliseconds=18), took_ms=6.0)
    assert mark.took_seconds == 0.006  # not the 18 ms between the rows' timestamps
    assert Mark("action", start, "x", end=start + dt.timedelta(seconds=2)).took_seconds == 2.0


def test_a_negative_duration_is_never_shown() -> None:

    assert duration_text(-881.0) == "unknown (the recorded end is before the start)"
    assert duration_text(0.006) == "6ms" and duration_text(65) == "1m 05s"
