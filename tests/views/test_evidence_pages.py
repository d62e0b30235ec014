"""Log view, glossary, not-enrolled list and the timeline's zoom and links, through the real app (SQLite and PG)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from urllib.parse import unquote

from app.evidence.models import Anomaly
from app.jobs import service as jobs
from tests.factories import dashboard_registration, read_log_source, seed_history
from tests.views.html import parse


async def _evidence_in(sessions, attempt_id: int, log: Path, line_number: int) -> None:
    async with sessions() as session, session.begin():
        session.add(
            Anomaly(
                attempt_id=attempt_id,
                event_key=f"an-log-{attempt_id}",
                kind="NO_PROGRESS",
                category="NO_OUTPUT_TRAININGLOOP",
                detector="noprogress",
                message="no output for 900 s",
                log_path=str(log),
                line_number=line_number,
                line="iteration 1200",
                source_time=dt.datetime(2025, 3, 1, 8, 20, tzinfo=dt.UTC),
                detected_at=dt.datetime(2025, 3, 1, 8, 35, tzinfo=dt.UTC),
                details={"lastOutputAt": "2025-03-01T08:20:00+00:00"},
            )
        )


async def test_log_view_shows_the_lines_around_evidence_escaped_and_only_tracked_files(viewer, sessions, tmp_path):
    seeded = await seed_history(sessions)
    log = tmp_path / "train.out"
    log.write_text("".join(f"iteration {n} <b>loss</b>\n" for n in range(1, 301)))
    await _evidence_in(sessions, seeded.attempt_ids[0], log, 120)
    await read_log_source(sessions, attempt_id=seeded.attempt_ids[0], path=str(log))
    details = parse((await viewer.get("/dashboard/jobs/4242/attempts/0")).text)
    link = next(a for a in details.find_all("a", class_="log-link") if str(log) in unquote(a.attrs["href"]))
    page = await viewer.get(link.attrs["href"].split("#")[0])
    assert page.status_code == 200 and "<b>loss</b>" not in page.text and "&lt;b&gt;loss&lt;/b&gt;" in page.text
    doc = parse(page.text)
    numbers = [int(tr.attrs["id"][1:]) for tr in doc.find_all("tr") if tr.attrs.get("id", "").startswith("L")]
    assert numbers == list(range(70, 171))
    assert doc.by_id("L120").attrs.get("aria-current") == "true"
    # Not a file of this attempt (even a real one), a bad line, an unknown attempt: clear refusals.
    other = tmp_path / "secret.txt"
    other.write_text("nope\n")
    refused = await viewer.get("/dashboard/jobs/4242/attempts/0/log", params={"path": str(other), "line": 1})
    assert refused.status_code == 404 and "nope" not in refused.text and "only files Recovery reads" in refused.text
    assert (
        await viewer.get("/dashboard/jobs/4242/attempts/0/log", params={"path": str(log), "line": "x"})
    ).status_code == 400
    assert (
        await viewer.get("/dashboard/jobs/4242/attempts/9/log", params={"path": str(log), "line": 1})
    ).status_code == 404
    # The attempt's StdOut the collector has not read (yet, or refused it): not shown.
    unread = await viewer.get(
        "/dashboard/jobs/4242/attempts/0/log", params={"path": "/logs/llama-4242-0.out", "line": 5}
    )
    assert unread.status_code == 404 and "Not read by Recovery" in unread.text
    # A file the collector read that is gone since.
    log.unlink()
    gone = await viewer.get("/dashboard/jobs/4242/attempts/0/log", params={"path": str(log), "line": 5})
    assert gone.status_code == 200 and "no longer exists" in gone.text
    # The timeline shades the hang's silence and links every mark to its event row.
    timeline = parse((await viewer.get("/dashboard/jobs/4242/attempts/0/timeline")).text)
    assert timeline.find("g", class_="silence") is not None
    anchors = [a.attrs["href"][1:] for a in timeline.find_all("a", class_="mark-link")]
    assert anchors and all(timeline.by_id(anchor) is not None for anchor in anchors)


async def test_timeline_zoom_links_and_bad_ranges(viewer, sessions) -> None:
    await seed_history(sessions)
    base = "/dashboard/jobs/4242/attempts/1/timeline"
    whole = parse((await viewer.get(base)).text).find("svg", class_="timeline")
    mine = parse((await viewer.get(base + "?zoom=attempt")).text).find("svg", class_="timeline")
    assert mine.attrs["data-start"] > whole.attrs["data-start"]
    ranged = parse((await viewer.get(base, params={"from": "2025-03-01T08:30", "to": "2025-03-01T08:40Z"})).text)
    svg = ranged.find("svg", class_="timeline")
    assert (svg.attrs["data-start"], svg.attrs["data-end"]) == ("2025-03-01T08:30:00Z", "2025-03-01T08:40:00Z")
    zoom_in = next(a for a in ranged.find("nav", class_="zoom").find_all("a") if a.text == "zoom in")
    assert "from=2025-03-01T08%3A32%3A30Z" in zoom_in.attrs["href"]
    crumbs = [a.text for a in ranged.find("p", class_="crumbs").find_all("a")]
    assert crumbs[0] == "Workflows Overview" and crumbs[-2:] == ["job 4242", "attempt 1"] and len(crumbs) == 4
    for bad in ({"from": "yesterday"}, {"from": "2025-03-01T09:00", "to": "2025-03-01T08:00"}, {"from": "0001-01-01"}):
        answer = await viewer.get(base, params=bad)
        assert answer.status_code == 200 and parse(answer.text).by_id("zoom-error") is not None, bad


async def test_not_enrolled_list_is_complete_paged_counted_and_searchable(viewer, sessions) -> None:
    async with sessions() as session, session.begin():
        for n in range(60):
            await jobs.register_job(
                session,
                registration=dashboard_registration(
                    7000 + n,
                    enrolment="UNMANAGED_PARTITION" if n % 2 else "INVALID_POLICY",
                    enrolment_reason=f"reason {n}",
                    workflow_key=None,
                ),
            )
    overview = parse((await viewer.get("/dashboard/workflow")).text).by_id("not-enrolled")
    assert "20 of 60 shown" in overview.text and overview.by_id("not-enrolled-all") is not None
    first = parse((await viewer.get("/dashboard/not-enrolled")).text)
    rows = first.by_id("not-enrolled").find("tbody").find_all("tr")
    assert len(rows) == 50 and "60" in first.find("h1").text
    assert [th.text for th in first.find("thead").find_all("th")][-2:] == ["First seen", "Last seen"]
    older = await viewer.get(first.by_id("not-enrolled-older").attrs["href"])
    assert len(parse(older.text).by_id("not-enrolled").find("tbody").find_all("tr")) == 10
    found = parse((await viewer.get("/dashboard/not-enrolled", params={"q": "7013"})).text)
    assert [tr.find("a").text for tr in found.find("tbody").find_all("tr")] == ["7013"]
    by_reason = parse((await viewer.get("/dashboard/not-enrolled", params={"q": "unmanaged"})).text)
    assert len(by_reason.find("tbody").find_all("tr")) == 30
    assert (await viewer.get("/dashboard/not-enrolled", params={"before": "x"})).status_code == 200
    # An unknown state filter says so instead of silently matching nothing.
    state = parse((await viewer.get("/dashboard/workflow", params={"state": "EXPLODED"})).text)
    assert "There is no state 'EXPLODED'" in state.text


async def test_glossary_page_and_tooltips(viewer, sessions) -> None:
    await seed_history(sessions)
    glossary = parse((await viewer.get("/dashboard/glossary")).text)
    assert glossary.by_id("term-generation") is not None and "SIGKILL" in glossary.find_all("table")[1].text
    details = parse((await viewer.get("/dashboard/jobs/4242/attempts/0")).text)
    buttons = details.find_all("button", class_="gloss-term")
    assert {b.text for b in buttons} >= {"Advice", "generation", "Reconciliation"}  # "Why it ended" is plain words
    for button in buttons:  # each names a description that exists on the page
        assert details.by_id(button.attrs["aria-describedby"]) is not None and button.attrs["data-tip"]
    refused = parse((await viewer.get("/dashboard/jobs/4243")).text)
    assert "mode act" not in refused.text and "Recovery does not look after this job" in refused.text


async def test_log_view_needs_a_signed_in_user(anonymous, sessions, tmp_path) -> None:
    await seed_history(sessions)
    answer = await anonymous.get(
        "/dashboard/jobs/4242/attempts/0/log", params={"path": "/logs/llama-4242-0.out", "line": 1}
    )
    assert answer.status_code in (302, 303, 401) and "llama" not in answer.text
