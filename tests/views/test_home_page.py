"""The operator's home page: counters of the range and the "Needs you" list (observe-only never waits for anyone)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from app.advice.models import Advice
from app.fleet.models import ClusterPause, NodeStanding
from app.infra.db import utcnow
from app.jobs import service as jobs
from tests.factories import CLUSTER, dashboard_registration
from tests.views.html import parse

HOSTILE = "<script>alert(1)</script>"


async def _decided(session: Any, slurm_job_id: int, *, at: dt.datetime, **advice: Any) -> Advice:
    job = await jobs.register_job(
        session, registration=dashboard_registration(slurm_job_id, workflow_key=f"wf-{slurm_job_id}")
    )
    attempt = await jobs.create_attempt(session, job=job, attempt_index=0, state="FAILED", produced_at=at)
    values = {
        "operation": "RESTART",
        "reason": f"attempt 0 of {slurm_job_id} failed.",
        "mode": "act",
        "disposition": "CONVERGED",
        "active": False,
        **advice,
    }
    row = Advice(
        attempt_id=attempt.id,
        job_id=job.id,
        cluster=CLUSTER,
        slurm_job_id=slurm_job_id,
        attempt_index=0,
        exclusions=[],
        generation=1,
        created_at=at,
        updated_at=at,
        **values,
    )
    session.add(row)
    await session.flush()
    return row


async def _seed(sessions: Any) -> dict[str, int]:
    now = utcnow()
    recent, old = now - dt.timedelta(hours=2), now - dt.timedelta(days=3)
    async with sessions() as session, session.begin():
        await _decided(session, 701, at=recent)  # recovered
        stopped = await _decided(session, 702, at=recent, operation="TERMINATE", reason="retry limit reached.")
        observed = await _decided(
            session,
            703,
            at=recent,
            mode="observe",
            disposition="PENDING",
            disposition_reason="NOT_AUTHORIZED",
            active=True,
        )
        held = await _decided(
            session,
            704,
            at=recent,
            disposition="PENDING",
            disposition_reason="BUDGET_EXCEEDED",
            disposition_message="workflow budget of 3 restarts per hour is used up",
            active=True,
        )
        await _decided(session, 705, at=old, operation="TERMINATE")  # outside the last 24 hours
        await jobs.register_job(
            session,
            registration=dashboard_registration(
                706,
                enrolment="ENVIRONMENT_MISMATCH",
                enrolment_reason=f"environment 'Test-Env' {HOSTILE} (they differ only in case or surrounding spaces)",
            ),
        )
        await jobs.register_job(
            session,
            registration=dashboard_registration(
                707, enrolment="UNMANAGED_PARTITION", enrolment_reason="partition debug is not managed"
            ),
        )
        session.add(
            NodeStanding(
                cluster=CLUSTER,
                node="gpu-z09",
                state="SUSPECT",
                suspect_since=recent,
                suspect_until=now + dt.timedelta(hours=1),
                jobs=[701, 702],
            )
        )
        session.add(ClusterPause(cluster=CLUSTER, message="3 failing jobs within 600 s", jobs=[1, 2, 3]))
    return {"stopped": stopped.id, "observed": observed.id, "held": held.id}


async def test_home_counts_the_day_and_lists_what_needs_someone(viewer, sessions) -> None:
    seeded = await _seed(sessions)
    response = await viewer.get("/dashboard/")
    assert response.status_code == 200
    assert HOSTILE not in response.text and "&lt;script&gt;" in response.text  # a refusal reason is escaped
    doc = parse(response.text)
    counters = {li.attrs.get("data-counter"): li.find("span").text for li in doc.by_id("counters").find_all("li")}
    assert counters["recovered"] == "1" and counters["stopped"] == "1" and counters["observe-only"] == "1"
    assert counters["held"] == "2"  # the budget hold and the storm
    assert counters["refused"] == "2" and counters["suspect"] == "1"
    needs = doc.by_id("needs-you")
    kinds = [li.attrs["data-need"] for li in needs.find_all("li")]
    assert kinds == ["storm", "held", "node", "refused", "stopped"]
    assert needs.find("li", data_need="held").attrs["data-advice"] == str(seeded["held"])
    assert needs.find("li", data_need="stopped").attrs["data-advice"] == str(seeded["stopped"])
    assert needs.find("li", data_need="refused").attrs["data-job"] == "706"  # the likely typo, not the partition
    # observe-only Advice is counted but never listed as waiting for a person
    assert str(seeded["observed"]) not in [li.attrs.get("data-advice") for li in needs.find_all("li")]
    assert "nothing to approve" in needs.text
    # the held restart's story says it waits, and the Overview's outcome (SQL) agrees with the story (Python)
    overview = parse((await viewer.get("/dashboard/workflow", params={"outcome": "running"})).text)
    held = overview.find("tr", data_workflow="wf-704")
    assert held.find(None, data_outcome=True).text == "running"
    assert "held by a recovery budget: waits for an operator to release it" in held.text


async def test_home_range_is_selectable_and_says_when_a_range_is_not_offered(viewer, sessions) -> None:
    await _seed(sessions)
    week = parse((await viewer.get("/dashboard/?hours=168")).text)
    assert {li.attrs.get("data-counter"): li.find("span").text for li in week.by_id("counters").find_all("li")}[
        "stopped"
    ] == "2"
    odd = await viewer.get("/dashboard/?hours=5")
    assert odd.status_code == 200 and "showing the last 24 hours" in odd.text


async def test_home_with_nothing_recorded_says_nothing_needs_you(viewer) -> None:
    doc = parse((await viewer.get("/dashboard/")).text)
    assert "Nothing needs you" in doc.by_id("nothing-needed").text
    assert doc.by_id("graphiql-link").attrs["href"] == "/graphql"  # every page links the API explorer


DAY_QUERY = """query($hours: Int!, $cluster: String) { operatorDay(hours: $hours, cluster: $cluster) {
  since hours cluster failures recovered stopped observeOnly held refused suspectNodes needsSomeone
  needsYou { kind cluster title detail dashboardPath slurmJobId attemptIndex adviceId node } } }"""


async def test_graphql_and_rest_answer_what_the_home_page_shows(viewer, sessions) -> None:
    seeded = await _seed(sessions)
    doc = parse((await viewer.get("/dashboard/", params={"hours": 24})).text)
    page_counts = [li.find("span").text for li in doc.by_id("counters").find_all("li")]
    page_kinds = [li.attrs["data-need"] for li in doc.by_id("needs-you").find_all("li")]

    answer = await viewer.post("/graphql", json={"query": DAY_QUERY, "variables": {"hours": 24}})
    assert answer.status_code == 200 and "errors" not in answer.json(), answer.text
    day = answer.json()["data"]["operatorDay"]
    keys = ("failures", "recovered", "stopped", "observeOnly", "held", "refused", "suspectNodes")
    assert [str(day[k]) for k in keys] == page_counts
    assert [n["kind"] for n in day["needsYou"]] == page_kinds and day["needsSomeone"] == len(page_kinds)
    held = next(n for n in day["needsYou"] if n["kind"] == "held")
    assert held["adviceId"] == seeded["held"] and held["slurmJobId"] == 704
    assert held["dashboardPath"] == "/dashboard/jobs/704/attempts/0#advice"
    assert (await viewer.get(held["dashboardPath"].split("#")[0])).status_code == 200  # the link is a real page
    assert seeded["observed"] not in [n["adviceId"] for n in day["needsYou"]]  # observe-only never waits

    rest = await viewer.get("/v1/operator-day", params={"hours": 24})
    assert rest.status_code == 200, rest.text
    body = rest.json()
    assert {k: body[k] for k in keys} == {k: day[k] for k in keys}
    assert [n["kind"] for n in body["needsYou"]] == page_kinds
    assert body["hours"] == 24 and body["cluster"] is None

    # one cluster: another cluster's rows are not counted (page, GraphQL and REST alike)
    elsewhere = await viewer.get("/v1/operator-day", params={"cluster": "no-such-cluster"})
    assert elsewhere.json()["needsSomeone"] == 0 and elsewhere.json()["stopped"] == 0
    mine = await viewer.post("/graphql", json={"query": DAY_QUERY, "variables": {"hours": 24, "cluster": CLUSTER}})
    assert mine.json()["data"]["operatorDay"]["stopped"] == 1
    other = parse((await viewer.get("/dashboard/", params={"cluster": "no-such-cluster"})).text)
    assert "Nothing needs you" in other.by_id("nothing-needed").text

    # bad input is a clear 400 / GraphQL error, never a 500
    assert (await viewer.get("/v1/operator-day", params={"hours": "0"})).status_code == 400
    assert (await viewer.get("/v1/operator-day", params={"hours": "x"})).status_code == 400
    bad = await viewer.post("/graphql", json={"query": DAY_QUERY, "variables": {"hours": 9000}})
    assert "hours must be between 1 and 8760" in bad.text
