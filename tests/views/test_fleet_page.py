"""The Nodes view and the fleet actions in the dashboard: evidence per node, a storm banner, operator-only actions."""

from __future__ import annotations

from sqlalchemy import select

from app.audit.models import AuditEvent
from app.domain.decision.advice import Failure
from app.domain.decision.retry import FailureKind
from app.fleet import service as fleet
from app.fleet.models import ClusterPause
from app.infra.config import Settings
from tests.factories import CLUSTER
from tests.views.html import parse


async def _suspect(sessions, node: str) -> None:
    settings = Settings.build(cluster=CLUSTER, node_suspect_jobs=2)
    for job in (701, 702):
        failure = Failure(
            attempt_index=0, kind=FailureKind.CRASH, category="XID", implicated_nodes=(node,), outlook="infrastructure"
        )
        async with sessions() as session, session.begin():
            await fleet.note_failure(
                session, settings=settings, job_id=job, attempt_id=job, slurm_job_id=job, failure=failure
            )


async def test_nodes_view_lists_evidence_and_viewers_get_no_actions(viewer, sessions) -> None:
    await _suspect(sessions, "gpu3")
    page = await viewer.get("/dashboard/nodes")
    assert page.status_code == 200
    doc = parse(page.text)
    row = doc.find("tr", data_node="gpu3")
    assert row.attrs["data-state"] == "SUSPECT"
    assert [a.text for a in row.find_all("a")][:2] == ["701", "702"]
    assert "701/0 XID" in row.text
    assert not doc.find_all("td", class_="operator-actions")
    assert doc.find("a", href="/dashboard/nodes").attrs.get("aria-current") == "page"


async def test_operator_pins_a_node_and_confirms_a_storm_from_the_banner(operator, sessions) -> None:
    async with sessions() as session, session.begin():
        session.add(
            ClusterPause(cluster=CLUSTER, message="restart storm on cluster test: 12 distinct jobs failed", jobs=[1, 2])
        )
    overview = parse((await operator.get("/dashboard/workflow")).text)
    banner = overview.find("div", data_storm=CLUSTER)
    assert "Automatic action paused on cluster test" in banner.text
    assert banner.find("button").text == "Confirm and resume"
    pinned = await operator.post(
        "/dashboard/fleet/pin", data={"cluster": CLUSTER, "node": "gpu4"}, follow_redirects=False
    )
    assert pinned.status_code == 303 and pinned.headers["location"] == "/dashboard/nodes"
    confirmed = await operator.post(
        "/dashboard/fleet/confirm", data={"cluster": CLUSTER, "next": "/dashboard/workflow"}, follow_redirects=False
    )
    assert confirmed.status_code == 303 and confirmed.headers["location"] == "/dashboard/workflow"
    assert not parse((await operator.get("/dashboard/workflow")).text).find_all("div", data_storm=CLUSTER)
    doc = parse((await operator.get("/dashboard/nodes")).text)
    assert doc.find("tr", data_node="gpu4").attrs["data-state"] == "PINNED"
    again = await operator.post("/dashboard/fleet/confirm", data={"cluster": CLUSTER})
    assert again.status_code == 404 and "not paused" in again.text
    async with sessions() as session:
        found = (await session.scalars(select(AuditEvent.event_type).where(AuditEvent.actor == "otto"))).all()
    assert sorted(found) == ["node.pinned", "storm.confirmed"]


async def test_viewer_cannot_take_fleet_actions(viewer) -> None:
    refused = await viewer.post("/dashboard/fleet/pin", data={"cluster": CLUSTER, "node": "gpu4", "csrf_token": "x"})
    assert refused.status_code == 403
