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
