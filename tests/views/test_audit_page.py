"""Audit Events: job box (job or job/attempt, attempt 0 included), exact filters, first page on apply/reset,
shareable URL."""

from __future__ import annotations

import datetime as dt

from app.audit import service as audit
from app.jobs import service as jobs
from tests.factories import T0, dashboard_registration, seed_history
from tests.views.html import parse


async def _many_events(sessions, count: int) -> None:
    async with sessions() as session, session.begin():
        for i in range(count):
            await audit.record(
                session,
                component="collector",
                event_type="log.read",
                level="DEBUG",
                message=f"read chunk {i}",
                cluster="test",
                slurm_job_id=555,
                attempt_index=i % 2,
                produced_at=T0 + dt.timedelta(seconds=i),
            )


def _event_ids(html: str) -> list[str]:
    return [tr.attrs["data-event-id"] for tr in parse(html).find_all("tr", data_event_id=True)]


async def test_job_box_selects_all_attempts_or_one_attempt_including_zero(viewer, sessions) -> None:
    await seed_history(sessions)
    every = parse((await viewer.get("/dashboard/audit?job=4242")).text)
    attempts = {a.text.split("/")[1] for a in every.by_id("audit-results").find_all("a") if "/" in a.text}
    assert attempts == {"0", "1"}
    zero = parse((await viewer.get("/dashboard/audit?job=4242/0")).text)
    links = [a.text for a in zero.by_id("audit-results").find_all("a")]
    assert links and set(links) == {"4242/0"}
    assert zero.find("input", type="text").attrs["value"] == "4242/0"


async def test_event_type_by_prefix_component_and_level_filters(viewer, sessions) -> None:
    await seed_history(sessions)
    doc = parse(
        (await viewer.get("/dashboard/audit?event_type=reconciliation.converged&component=controller&level=INFO")).text
    )
    types = [code.text for code in doc.by_id("audit-results").find_all("code")]
    assert types == ["reconciliation.converged"]
    # A family matches every type under it, with or without its dot; half a word matches nothing.
    family = _event_ids((await viewer.get("/dashboard/audit?event_type=reconciliation.")).text)
    assert family and family == _event_ids((await viewer.get("/dashboard/audit?event_type=reconciliation")).text)
    assert not _event_ids((await viewer.get("/dashboard/audit?event_type=reconcil")).text)
    assert not _event_ids((await viewer.get("/dashboard/audit?event_type=reconciliation.%25")).text)  # LIKE escaped
    # Suggestions are the types that occur, with counts; the total is counted; an unknown type says what exists.
    page = parse((await viewer.get("/dashboard/audit?event_type=anomaly.")).text)
    options = {o.attrs["value"]: o.attrs.get("label") for o in page.by_id("event-types").find_all("option")}
    assert options["anomaly.detected"] == "1 event(s)" and "anomaly." in options and "advice.vetoed" not in options
    assert page.find("strong", class_="total").text == "1"
    unknown = parse((await viewer.get("/dashboard/audit?event_type=checkpoint.recorded")).text).by_id("audit-results")
    assert "No event has the type" in unknown.text and "anomaly.detected" in unknown.text
    errors = parse((await viewer.get("/dashboard/audit?level=ERROR")).text).by_id("audit-results")
    assert [c.text for c in errors.find_all("code")] == ["anomaly.detected"]


async def test_time_range_filter(viewer, sessions) -> None:
    await _many_events(sessions, 10)
    ids = _event_ids(
        (await viewer.get("/dashboard/audit?job=555&from=2025-03-01T08:00:03&to=2025-03-01T08:00:06Z")).text
    )
    assert len(ids) == 3


async def test_bad_filters_show_errors_next_to_the_field_not_a_500(viewer) -> None:
    response = await viewer.get("/dashboard/audit?job=12x/0&level=LOUD&from=yesterday")
    assert response.status_code == 200
    doc = parse(response.text)
    job_label = doc.find("input", type="text").parent
    assert job_label is not None
    assert (
        "invalid" in job_label.attrs["class"]
        and "expected a job id or job_id/attempt_index" in job_label.find("span", class_="field-error").text
    )
    assert len(doc.find_all("span", class_="field-error")) == 3
    assert "Fix the highlighted filter" in doc.by_id("audit-results").text
    forged = await viewer.get("/dashboard/audit?after=not-a-cursor")
    assert forged.status_code == 200 and "showing the first page" in forged.text


async def test_pagination_next_previous_and_filters_restart_at_first_page(viewer, sessions) -> None:
    await _many_events(sessions, 120)
    first = parse((await viewer.get("/dashboard/audit?component=collector")).text)
    first_ids = [tr.attrs["data-event-id"] for tr in first.find_all("tr", data_event_id=True)]
    assert len(first_ids) == 50 and first.find("p", class_="page-info").attrs["data-first-page"] == "yes"
    next_href = first.by_id("audit-next").attrs["href"]
    assert next_href is not None
    assert next_href.startswith("/dashboard/audit?") and "component=collector" in next_href and "after=" in next_href
    second = parse((await viewer.get(next_href)).text)
    second_ids = [tr.attrs["data-event-id"] for tr in second.find_all("tr", data_event_id=True)]
    assert len(second_ids) == 50 and not set(first_ids) & set(second_ids)
    assert int(second_ids[0]) < int(first_ids[-1])  # newest first, continuing
    back = parse((await viewer.get(second.by_id("audit-prev").attrs["href"])).text)
    assert [tr.attrs["data-event-id"] for tr in back.find_all("tr", data_event_id=True)] == first_ids
    # the filter form carries no cursor: applying filters from a later page starts at the first page
    form = second.by_id("audit-filters")
    assert form.attrs["method"] == "get" and form.attrs["hx-push-url"] == "true"
    assert {i.attrs.get("name") for i in form.find_all("input")} == {"job", "event_type", "from", "to"}
    assert second.by_id("audit-reset").attrs["href"] == "/dashboard/audit"


async def test_oldest_first_order(viewer, sessions) -> None:
    await _many_events(sessions, 5)
    newest = _event_ids((await viewer.get("/dashboard/audit?job=555")).text)
    oldest = _event_ids((await viewer.get("/dashboard/audit?job=555&order=oldest")).text)
    assert oldest == list(reversed(newest))


async def test_job_box_takes_an_array_task_name(viewer, sessions) -> None:
    async with sessions() as session, session.begin():
        await jobs.register_job(session, registration=dashboard_registration(556, array_job_id=555, array_task_id=1))
    await _many_events(sessions, 4)
    async with sessions() as session, session.begin():
        await audit.record(
            session, component="collector", event_type="log.read", message="task", cluster="test", slurm_job_id=556
        )
    task = parse((await viewer.get("/dashboard/audit?job=555_1")).text)
    assert [a.text for a in task.by_id("audit-results").find_all("a")] and {
        a.text.split("/")[0] for a in task.by_id("audit-results").find_all("a") if a.text[:1].isdigit()
    } == {"556"}
    assert task.find("input", type="text").attrs["value"] == "555_1"
    missing = parse((await viewer.get("/dashboard/audit?job=555_9")).text)
    assert "no array task 555_9 is recorded" in missing.text
