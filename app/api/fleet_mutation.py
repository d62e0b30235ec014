"""Operator actions on fleet-wide trust: release or extend recovery budgets, confirm storms, clear or pin nodes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import strawberry

from app.api import validation
from app.api.errors import bad_input, not_found
from app.api.ids import GlobalIdError, expect_global_id
from app.api.types.fleet import (
    BudgetExtension,
    ComputeNode,
    RecoveryHold,
    StormPause,
    compute_node_of,
    extension_of,
    hold_of,
    pause_of,
)
from app.domain.edge import bounds
from app.fleet import queries as fleet_queries
from app.fleet import service as fleet
from app.infra.db import Session

Info = strawberry.Info


async def _fleet(info: Info, action: Callable[[Session, str], Awaitable[Any]], *, by_id: bool = False) -> Any:
    # A cluster, workflow or node named in free text that has nothing to act on is the caller's input error;
    # only a well-formed Advice id that names nothing held is NOT_FOUND (as for approveAdvice).
    principal = info.context.operator()
    try:
        async with info.context.loaders.sessions() as session, session.begin():
            return await action(session, principal.name)
    except fleet.FleetError as exc:
        raise (not_found(str(exc)) if exc.not_found and by_id else bad_input(str(exc))) from None


def _note(note: str | None) -> str | None:
    return validation.text(note, "note", maximum=bounds.MAX_REASON_LENGTH) or None


def _name(value: str, name: str, maximum: int = bounds.MAX_FILTER_LENGTH) -> str:
    checked = validation.text(value, name, maximum=maximum) or ""
    if not checked.strip():
        raise bad_input(f"{name} must not be empty")
    return checked.strip()


@strawberry.type
class FleetMutation:
    @strawberry.mutation(
        description="Carry out one Advice held past a recovery budget (operator role). Audit event budget.released."
    )
    async def release_held_advice(self, info: Info, id: strawberry.ID, note: str | None = None) -> RecoveryHold:
        info.context.operator()
        try:
            advice_id = expect_global_id(str(id), "Advice")
        except GlobalIdError as exc:
            raise bad_input(str(exc)) from None
        text = _note(note)
        row = await _fleet(
            info, lambda s, user: fleet.release_hold(s, advice_id=advice_id, user=user, note=text), by_id=True
        )
        return hold_of(row)

    @strawberry.mutation(
        description="Add restarts to a workflow's budget (or the cluster's, without workflowId) for one window; "
        "held Advice are looked at again (operator role). Audit event budget.extended."
    )
    async def extend_budget(
        self, info: Info, cluster: str, extra: int, workflow_id: str | None = None, note: str | None = None
    ) -> BudgetExtension:
        info.context.operator()
        name = _name(cluster, "cluster")
        key = validation.text(workflow_id, "workflowId", maximum=bounds.MAX_KEY_LENGTH) or None
        text = _note(note)
        settings = info.context.app.settings
        row = await _fleet(
            info,
            lambda s, user: fleet.extend_budget(
                s, cluster=name, workflow_key=key, extra=extra, user=user, settings=settings, note=text
            ),
        )
        return extension_of(row)

    @strawberry.mutation(
        description="Confirm a restart storm: automatic action on the cluster resumes (operator role). "
        "Audit event storm.confirmed."
    )
    async def confirm_storm(self, info: Info, cluster: str, note: str | None = None) -> StormPause:
        info.context.operator()
        name, text = _name(cluster, "cluster"), _note(note)
        row = await _fleet(info, lambda s, user: fleet.confirm_storm(s, cluster=name, user=user, note=text))
        return pause_of(row)

    @strawberry.mutation(
        description="Clear a node (its blames so far stop counting) or pin it (always excluded) or unpin it: "
        "action is clear, pin or unpin (operator role). Audit events node.cleared, node.pinned, node.unpinned."
    )
    async def set_node_standing(
        self, info: Info, cluster: str, node: str, action: str, note: str | None = None
    ) -> ComputeNode:
        info.context.operator()
        name, host, text = _name(cluster, "cluster"), _name(node, "node", bounds.MAX_NODE_LENGTH), _note(note)
        verb = (validation.text(action, "action") or "").strip().lower()

        async def run(session: Session, user: str) -> ComputeNode:
            row = await fleet.set_node(session, cluster=name, node=host, action=verb, user=user, note=text)
            blames = await fleet_queries.blames_of_node(session, cluster=name, node=host)
            return compute_node_of(row, blames)

        result: ComputeNode = await _fleet(info, run)
        return result
