"""The Mutation root: operator review of Advice (approve, veto, re-run reconciliation, decide again now); fleet
actions mixed in."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import strawberry

from app.advice import review
from app.api import validation
from app.api.errors import bad_input, not_found
from app.api.fleet_mutation import FleetMutation
from app.api.ids import GlobalIdError, expect_global_id
from app.api.types import Advice
from app.domain.edge import bounds
from app.infra.db import Session

if TYPE_CHECKING:  # row types for annotations only: the SQL lives in the areas' queries
    from app.advice.models import Advice as AdviceRow
else:  # strawberry resolves annotations at run time: a row is opaque to it
    AdviceRow = Any

Info = strawberry.Info


async def _review(info: Info, id: strawberry.ID, action: Callable[[Session, int, str], Awaitable[AdviceRow]]) -> Advice:
    # The role check comes first: a refused caller changes nothing and records nothing.
    principal = info.context.operator()
    try:
        advice_id = expect_global_id(str(id), "Advice")
    except GlobalIdError as exc:
        raise bad_input(str(exc)) from None
    try:
        async with info.context.loaders.sessions() as session, session.begin():
            row = await action(session, advice_id, principal.name)
    except review.ReviewError as exc:
        raise (not_found(str(exc)) if exc.not_found else bad_input(str(exc))) from None
    return Advice(row=row)


@strawberry.type
class Mutation(FleetMutation):
    @strawberry.mutation(
        description="Approve an active Advice (operator role). Recorded as audit event advice.approved."
    )
    async def approve_advice(self, info: Info, id: strawberry.ID) -> Advice:
        return await _review(info, id, lambda s, pk, user: review.approve_advice(s, advice_id=pk, user=user))

    @strawberry.mutation(
        description="Veto an Advice for good: inactive, ABANDONED/VETOED (operator role). Audit event advice.vetoed."
    )
    async def veto_advice(self, info: Info, id: strawberry.ID, reason: str) -> Advice:
        reason = validation.text(reason, "reason", maximum=bounds.MAX_REASON_LENGTH) or ""
        return await _review(
            info, id, lambda s, pk, user: review.veto_advice(s, advice_id=pk, user=user, reason=reason)
        )

    @strawberry.mutation(
        description="Reconcile now; Advice ABANDONED for a transient reason becomes active PENDING "
        "again (operator role). "
        "Audit event advice.reconcile_requested."
    )
    async def rerun_reconciliation(self, info: Info, id: strawberry.ID) -> Advice:
        return await _review(info, id, lambda s, pk, user: review.rerun_reconciliation(s, advice_id=pk, user=user))

    @strawberry.mutation(
        description="Decide a recent observe-mode failure again now (operator role): a NEW Advice decided under the "
        "mode now, returned; the old one stays ABANDONED/DECIDED_IN_OBSERVE, never carried out. Refused unless the "
        "job's mode is act now, the attempt is still the job's newest, the Advice has not expired and it was decided "
        "within the last hour. Audit event advice.decided_again."
    )
    async def decide_advice_again(self, info: Info, id: strawberry.ID) -> Advice:
        settings = info.context.app.settings
        return await _review(
            info, id, lambda s, pk, user: review.decide_again(s, advice_id=pk, user=user, settings=settings)
        )
