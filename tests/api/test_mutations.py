"""Operator review of Advice: the operator role is required, each action is an audit event naming the user
and a feed entry."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.advice.models import Advice
from app.api.ids import to_global_id
from app.audit.models import AuditEvent
from app.feed.models import ChangeFeedEntry
from tests.api.helpers import operation, run_graphql
from tests.factories import seed_many


async def _audit_count(sessions: async_sessionmaker[AsyncSession]) -> int:
    async with sessions() as session:
        query = select(func.count()).select_from(AuditEvent).where(AuditEvent.component == "api")
        return (await session.execute(query)).scalar_one()


async def test_viewer_cannot_review_and_nothing_is_recorded(
    token_client: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession]
) -> None:
    seeded = await seed_many(sessions, count=1, advice=True)
    advice_id = to_global_id("Advice", seeded.advice[0].id)
    for name, variables in (
        ("ApproveAdvice", {"id": advice_id}),
        ("VetoAdvice", {"id": advice_id, "reason": "no"}),
        ("RerunReconciliation", {"id": advice_id}),
    ):
        response = await token_client.post(
            "/graphql",
            json={"query": operation(name), "variables": variables},
            headers={"Authorization": "Bearer viewer-token"},
        )
        assert response.status_code == 403, (name, response.text)
        error = response.json()["errors"][0]
        assert error["extensions"]["code"] == "FORBIDDEN" and "operator role is required" in error["message"]
    assert await _audit_count(sessions) == 0
    async with sessions() as session:
        row = await session.get(Advice, seeded.advice[0].id)
        assert row is not None
        assert row.review is None and row.active


async def test_approve_veto_and_rerun(
    token_client: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession]
) -> None:
    seeded = await seed_many(sessions, count=1, attempts=3, advice=True)
    approve_id, veto_id, rerun_id = (to_global_id("Advice", a.id) for a in seeded.advice)
    operator: dict[str, Any] = {"token": "operator-token"}

    approved = (await run_graphql(token_client, operation("ApproveAdvice"), {"id": approve_id}, **operator))["data"][
        "approveAdvice"
    ]
    assert approved["review"] == "APPROVED" and approved["reviewedBy"] == "otto" and approved["active"]

    vetoed = (
        await run_graphql(token_client, operation("VetoAdvice"), {"id": veto_id, "reason": "node is fine"}, **operator)
    )["data"]["vetoAdvice"]
    assert vetoed["active"] is False and vetoed["review"] == "VETOED"
    assert vetoed["reconciliation"]["disposition"] == "ABANDONED" and vetoed["reconciliation"]["reason"] == "VETOED"
    assert "node is fine" in vetoed["reconciliation"]["message"]
    again = await run_graphql(
        token_client, operation("RerunReconciliation"), {"id": veto_id}, expect_errors=True, **operator
    )
    assert "vetoed" in again["errors"][0]["message"]

    # Abandoned for a transient reason: a re-run reactivates it as PENDING and asks for reconciliation now.
    async with sessions() as session, session.begin():
        row = await session.get(Advice, seeded.advice[2].id)
        assert row is not None
        row.active, row.disposition, row.disposition_reason, row.reconcile_failures = (
            False,
            "ABANDONED",
            "JOB_NOT_FOUND",
            4,
        )
    rerun = (await run_graphql(token_client, operation("RerunReconciliation"), {"id": rerun_id}, **operator))["data"][
        "rerunReconciliation"
    ]
    assert (
        rerun["active"]
        and rerun["reconciliation"]["disposition"] == "PENDING"
        and rerun["reconciliation"]["reason"] is None
    )
    assert rerun["reconciliation"]["reconcileFailures"] == 0 and rerun["reconciliation"]["nextReconcileAt"]

    async with sessions() as session:
        events = (
            await session.scalars(select(AuditEvent).where(AuditEvent.component == "api").order_by(AuditEvent.id))
        ).all()
        feed = (
            await session.scalars(
                select(ChangeFeedEntry).where(ChangeFeedEntry.topic == "advice").order_by(ChangeFeedEntry.id)
            )
        ).all()
    assert [e.event_type for e in events] == ["advice.approved", "advice.vetoed", "advice.reconcile_requested"]
    assert all(e.actor == "otto" and "otto" in e.message for e in events)
    assert events[2].payload["reactivated"] is True
    assert [f.entity_id for f in feed] == [a.id for a in seeded.advice]


async def test_rerun_refuses_converged_advice_and_unknown_ids(
    token_client: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession]
) -> None:
    seeded = await seed_many(sessions, count=1, advice=True)
    async with sessions() as session, session.begin():
        row = await session.get(Advice, seeded.advice[0].id)
        assert row is not None
        row.active, row.disposition, row.disposition_reason = False, "CONVERGED", "DESIRED_STATE_OBSERVED"
    refused = await run_graphql(
        token_client,
        operation("RerunReconciliation"),
        {"id": to_global_id("Advice", row.id)},
        token="operator-token",
        expect_errors=True,
    )
    assert (
        "CONVERGED" in refused["errors"][0]["message"]
        and refused["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    )
    missing = await run_graphql(
        token_client,
        operation("ApproveAdvice"),
        {"id": to_global_id("Advice", 999999)},
        token="operator-token",
        expect_errors=True,
    )
    assert missing["errors"][0]["extensions"]["code"] == "NOT_FOUND"
    wrong_type = await run_graphql(
        token_client,
        operation("ApproveAdvice"),
        {"id": to_global_id("Attempt", 1)},
        token="operator-token",
        expect_errors=True,
    )
    assert "expected an id of Advice" in wrong_type["errors"][0]["message"]
    assert await _audit_count(sessions) == 0
