"""One effective mode: flipping the operator's acknowledgment ceiling changes every surface at once.

A job asks for act. The installation runs with the ceiling on, then restarts with it off (the
settings are read at start, so a restart is how an operator flips it), then on again. After each
start the API (GraphQL Job.effectiveMode and Advice.mode, REST attempts and Advice) and the
dashboard (attempt page, Advice list) say the same mode and reason, computed now; the job's mode
at registration and the Advice's mode at decision are kept as records of that time.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import httpx
import pytest

from app.domain.admission.mode import CEILING_SETTING
from app.infra.context import AppContext
from app.main import create_app
from tests.advice.helpers import SlurmLikeFake, acting, submit
from tests.factories import advice_of
from worker.advisor import Advisor
from worker.observer import Observer

JOB = 31
RECORDS = ("registered", "decided")  # modes stored as decided at a time, not the mode now
QUERY = """query($id: Int!) {
  job(jobId: $id) { effectiveMode modeReason modeAtRegistration }
  advice(jobId: $id) { edges { node { mode modeReason modeAtDecision } } }
}"""


async def _client(ctx: AppContext) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(ctx.settings, ctx=ctx)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as http:
        yield http


async def _surfaces(ctx: AppContext) -> dict[str, tuple[str, str]]:
    """(mode, reason) as each surface shows it, from a freshly started installation with these settings."""
    advisor = Advisor(ctx)
    await advisor.tick()  # the new process catches up: active Advice is re-decided under the settings now
    [stored] = await advice_of(ctx, JOB)
    async for http in _client(ctx):
        graphql = (await http.post("/graphql", json={"query": QUERY, "variables": {"id": JOB}})).json()
        assert "errors" not in graphql, graphql
        job = graphql["data"]["job"]
        [advice] = [edge["node"] for edge in graphql["data"]["advice"]["edges"]]
        [rest_advice] = (await http.get("/v1/advice")).json()["advice"]
        listed = (await http.get("/dashboard/advice")).text
        rest = (await http.get(f"/v1/jobs/by-scheduler-id/{JOB}")).json()
        page = (await http.get(f"/dashboard/jobs/{JOB}/attempts/0")).text
    [attempt] = rest["attempts"]
    dashboard_mode = re.search(r"<dt>Mode</dt><dd><strong>(?:<button [^>]*>)?(\w+)(?:</button>)?</strong>", page)
    dashboard_reason = re.search(r"<dt>Why</dt><dd>([^<]*)</dd>", page)
    assert dashboard_mode and dashboard_reason, page[:2000]
    listed_mode = re.search(rf'<tr id="advice-{stored.id}".*?<td>(act|observe)</td>', listed, re.S)
    assert listed_mode, listed[:2000]
    assert listed_mode.group(1) == dashboard_mode.group(1)  # the Advice list says the same
    return {
        "advice": (advice["mode"], advice["modeReason"]),
        "rest advice": (rest_advice["mode"], rest_advice["modeReason"]),
        "graphql": (job["effectiveMode"], job["modeReason"]),
        "rest": (attempt["effectiveMode"], attempt["modeReason"]),
        "dashboard": (dashboard_mode.group(1), dashboard_reason.group(1).replace("&#39;", "'")),
        "registered": (job["modeAtRegistration"], ""),
        "decided": (advice["modeAtDecision"], stored.mode),
    }


@pytest.fixture
def fake() -> SlurmLikeFake:
    return SlurmLikeFake()


async def test_flipping_the_ceiling_changes_every_surface_at_once(ctx: AppContext, fake: SlurmLikeFake) -> None:
    on = acting(ctx, acknowledge_scheduler_actions=True, dev_no_auth=True)
    off = acting(ctx, acknowledge_scheduler_actions=False, dev_no_auth=True)
    observer = Observer(on, fake)
    await Advisor(on).tick()  # positions start before the failure
    await submit(observer, fake, JOB)
    fake.finish(JOB, "FAILED", exit_code=1)
    await observer.tick()

    seen = await _surfaces(on)
    assert {name: mode for name, (mode, _) in seen.items()} == dict.fromkeys(seen, "act")
    assert len({reason for name, (_, reason) in seen.items() if name not in RECORDS}) == 1

    seen = await _surfaces(off)
    shown = {name: mode for name, (mode, _) in seen.items() if name not in RECORDS}
    assert shown == dict.fromkeys(shown, "observe"), seen
    reasons = {reason for name, (_, reason) in seen.items() if name not in RECORDS}
    assert len(reasons) == 1 and CEILING_SETTING in reasons.pop(), seen
    # What was decided at registration and at the decision stays a record of that time, labelled so.
    assert seen["registered"][0] == "act" and seen["decided"] == ("act", "act")

    seen = await _surfaces(on)  # and back
    assert {name: mode for name, (mode, _) in seen.items()} == dict.fromkeys(seen, "act"), seen
