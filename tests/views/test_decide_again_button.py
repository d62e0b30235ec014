"""The Advice page's "Decide again now" button: offered for an observe-mode decision while the job's mode is act,
it makes a new Advice; the old row says for good that it was decided in observe mode and not carried out."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from app.advice.models import Advice
from app.infra.config import Settings
from tests.factories import seed_many
from tests.views.helpers import OPERATOR_TOKEN, dashboard_settings, open_client
from tests.views.html import parse


@pytest.fixture
async def acting_operator(database: Any, settings: Settings, stub_tokens: None) -> AsyncIterator[httpx.AsyncClient]:
    """An operator's dashboard with the acknowledgment ceiling on (jobs that ask for act are in act mode now)."""
    acting = dashboard_settings(settings, acknowledge_scheduler_actions=True)
    async with await open_client(database, acting, OPERATOR_TOKEN) as client:
        yield client


async def test_decide_again_now_from_the_advice_page(acting_operator, operator, sessions) -> None:
    seeded = await seed_many(sessions, count=1, advice=True)  # decided in observe mode; the job asks for act
    old_id = seeded.advice[0].id
    off = parse((await operator.get("/dashboard/advice", params={"show": "all"})).text)  # ceiling off: not offered
    assert "Decide again now" not in [b.text for b in off.by_id(f"advice-{old_id}").find_all("button")]
    listing = parse((await acting_operator.get("/dashboard/advice", params={"show": "all"})).text)
    row = listing.by_id(f"advice-{old_id}")
    assert "Decide again now" in [b.text for b in row.find_all("button")]
    assert "decided in observe mode; not carried out" in row.text

    done = await acting_operator.post(f"/dashboard/advice/{old_id}/decide_again", follow_redirects=True)
    assert done.status_code == 200
    assert "Decided again now as Advice" in parse(done.text).by_id("action-result").text
    async with sessions() as session:
        old, new = (await session.scalars(select(Advice).order_by(Advice.id))).all()
    assert (new.mode, new.supersedes_id, old.superseded_by_id) == ("act", old.id, new.id)
    after = parse((await acting_operator.get("/dashboard/advice", params={"show": "all"})).text)
    old_row = after.by_id(f"advice-{old_id}")
    assert f"decided in observe mode; not carried out · decided again as Advice {new.id}" in old_row.text
    assert "DECIDED_IN_OBSERVE" in old_row.text
    assert "Decide again now" not in [b.text for b in old_row.find_all("button")]
    refused = await acting_operator.post(f"/dashboard/advice/{old_id}/decide_again")
    assert refused.status_code == 409 and "already decided again" in refused.text
