"""'Decide again now' through GraphQL (operator role only, audited) and what REST then shows of both Advice."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.advice.models import Advice
from app.api.ids import to_global_id
from app.audit.models import AuditEvent
from app.domain.decision.gate import DECIDED_IN_OBSERVE_TEXT
from app.infra.config import Settings
from app.infra.context import AppContext
from app.main import create_app
from tests.api.helpers import FakeAuthenticator, operation, run_graphql
from tests.factories import CLUSTER, seed_many
from tests.plugins.database import Database


@pytest.fixture
async def acting_client(
    database: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[httpx.AsyncClient]:
    """The API with test tokens and the operator's ceiling turned on (jobs that ask for act are in act mode now)."""
    monkeypatch.setattr("app.infra.context.process_authenticator", lambda settings: FakeAuthenticator())
    settings = Settings.build(
        database_url=database.url,
        data_dir=str(tmp_path),
        cluster=CLUSTER,
        oidc_issuer="https://idp.invalid",
        acknowledge_scheduler_actions=True,
    )
    ctx = AppContext(settings=settings, engine=database.engine, sessions=database.sessions)
    app = create_app(settings, ctx=ctx)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api.test") as http:
        yield http


async def test_decide_again_is_for_operators_and_makes_a_new_act_mode_advice(
    acting_client: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession]
) -> None:
    seeded = await seed_many(sessions, count=1, advice=True)  # an observe-mode Advice of a job that asks for act
    old_id = seeded.advice[0].id
    variables = {"id": to_global_id("Advice", old_id)}
    refused = await run_graphql(
        acting_client, operation("DecideAdviceAgain"), variables, token="viewer-token", expect_errors=True
    )
    assert refused["errors"][0]["extensions"]["code"] == "FORBIDDEN"
    async with sessions() as session:
        assert (await session.scalar(select(func.count()).select_from(Advice))) == 1

    body = await run_graphql(acting_client, operation("DecideAdviceAgain"), variables, token="operator-token")
    new = body["data"]["decideAdviceAgain"]
    assert (new["operation"], new["modeAtDecision"], new["active"]) == ("RESTART", "act", True)
    assert "decided again now by otto" in new["modeReasonAtDecision"]
    old = new["decidedAgainFrom"]
    assert old["id"] == variables["id"] and old["modeAtDecision"] == "observe" and old["active"] is False
    assert old["reconciliation"]["reason"] == "DECIDED_IN_OBSERVE"
    assert old["reconciliation"]["message"].startswith(DECIDED_IN_OBSERVE_TEXT)
    assert old["decidedAgainAs"]["id"] == new["id"]
    async with sessions() as session:
        [audit] = (
            await session.scalars(select(AuditEvent).where(AuditEvent.event_type == "advice.decided_again"))
        ).all()
    assert audit.actor == "otto"

    again = await run_graphql(
        acting_client, operation("DecideAdviceAgain"), variables, token="operator-token", expect_errors=True
    )
    assert "already decided again" in again["errors"][0]["message"]

    response = await acting_client.get("/v1/advice", headers={"Authorization": "Bearer viewer-token"})
    listed = {a["id"]: a for a in response.json()["advice"]}
    shown_old = listed[old_id]
    [new_id] = [i for i in listed if i != old_id]
    assert shown_old["decidedAgainAs"] == new_id and listed[new_id]["decidedAgainFrom"] == old_id
    assert shown_old["reconciliationStatus"]["reason"] == "DECIDED_IN_OBSERVE"
    assert shown_old["reconciliationStatus"]["message"].startswith(DECIDED_IN_OBSERVE_TEXT)
    assert "gate" in shown_old["reconciliationStatus"]["milestones"][0]


async def test_decide_again_of_an_unknown_or_huge_id_is_a_clean_error(acting_client: httpx.AsyncClient) -> None:
    for advice_id in (424242, 2**63):
        body = await run_graphql(
            acting_client,
            operation("DecideAdviceAgain"),
            {"id": to_global_id("Advice", advice_id)},
            token="operator-token",
            expect_errors=True,
        )
        assert body["errors"][0]["extensions"]["code"] in {"NOT_FOUND", "BAD_USER_INPUT"}, body
