"""The Subscription root: live attempt updates, audit events and Advice changes read from the change feed.

Each update carries `position` (the change-feed id). A client that reconnects with `after: <last
position>` gets every change since then: the feed table is the truth, NOTIFY (or a poll on SQLite)
only says when to read it again.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import TYPE_CHECKING, Any

import strawberry

from app.api import validation
from app.api.errors import bad_input
from app.api.ids import GlobalIdError, expect_global_id
from app.api.query import AuditEventFilter, audit_filter
from app.api.types import Advice, Attempt, AuditEvent, audit_event
from app.audit.queries import AuditFilter
from app.feed.tail import shared_tail
from app.infra.errors import retrying

if TYPE_CHECKING:  # row types for annotations only: the SQL lives in the areas' queries
    from app.advice.models import Advice as AdviceRow
    from app.audit.models import AuditEvent as AuditEventRow
    from app.feed.models import ChangeFeedEntry
else:  # strawberry resolves annotations at run time: a row is opaque to it
    AdviceRow = Any
    AuditEventRow = Any
    ChangeFeedEntry = Any

log = logging.getLogger("recovery.api")

Info = strawberry.Info


@strawberry.type(description="An attempt that was created or changed.")
class AttemptUpdate:
    position: str = strawberry.field(description="Change-feed position; pass it as `after` when you reconnect.")
    changed: list[str] = strawberry.field(description="Names of the fields that changed (empty for a new attempt).")
    created: bool
    state: str | None = strawberry.field(
        description="The attempt's state as of this change (attempt.state is its state now)."
    )
    attempt: Attempt


@strawberry.type(description="A newly recorded audit event.")
class AuditEventUpdate:
    position: str = strawberry.field(description="Change-feed position; pass it as `after` when you reconnect.")
    event: AuditEvent


@strawberry.type(description="An Advice that was created or changed (decision, review or reconciliation).")
class AdviceUpdate:
    position: str = strawberry.field(description="Change-feed position; pass it as `after` when you reconnect.")
    advice: Advice


def _position(after: str | None) -> int | None:
    return validation.position(after, "after")


async def _feed(
    info: Info,
    topics: Sequence[str],
    after: str | None,
    match: Callable[[ChangeFeedEntry], bool],
    workflow_id: int | None = None,
) -> AsyncGenerator[list[ChangeFeedEntry], None]:
    """Batches of matching feed entries after the start position, forever (woken by NOTIFY or a poll)."""
    context = info.context
    context.viewer()
    if not context.websocket:
        raise bad_input("subscriptions are served over WebSocket (graphql-transport-ws) at /graphql")
    position = _position(after)
    tail = shared_tail(context.app.settings.database_url, context.app.sessions)
    async with tail.subscriber(workflow_id) as subscriber:  # `match` wants only that workflow's entries
        await subscriber.start(position)
        while True:
            matching = [entry for entry in await subscriber.next(topics) if match(entry)]
            if matching:
                yield matching


def _audit_matches(flt: AuditFilter, event: AuditEventRow) -> bool:
    """The SPEC §7 filter applied to one event (what audit.service.query does in SQL)."""
    return (
        (flt.slurm_job_id is None or event.slurm_job_id == flt.slurm_job_id)
        and (flt.attempt_index is None or event.attempt_index == flt.attempt_index)
        and (not flt.component or event.component == flt.component)
        and (not flt.event_type or event.event_type == flt.event_type)
        and (not flt.level or event.level == flt.level)
        and (flt.produced_after is None or event.produced_at >= flt.produced_after)
        and (flt.produced_before is None or event.produced_at < flt.produced_before)
        and (not flt.cluster or event.cluster == flt.cluster)
        and (flt.workflow_id is None or event.workflow_id == flt.workflow_id)
    )


async def _rows(info: Info, loader_name: str, entries: Sequence[ChangeFeedEntry]) -> list[tuple[ChangeFeedEntry, Any]]:
    """The rows the entries name, loaded once per process for every subscriber that gets the same entries."""
    loader = getattr(info.context.loaders, loader_name)
    tail = shared_tail(info.context.app.settings.database_url, info.context.app.sessions)

    async def load(ids: list[int]) -> Sequence[Any]:
        return await retrying(functools.partial(loader.load_many, ids), what="subscription", logger=log)

    rows = await tail.rows(loader_name, entries, load)
    return [(entry, row) for entry, row in zip(entries, rows, strict=True) if row is not None]


@strawberry.type
class Subscription:
    @strawberry.subscription(
        description="Attempts of a workflow or of a Slurm job (or all, given neither) as they are created and change."
    )
    async def attempt_updates(
        self,
        info: Info,
        workflow_id: strawberry.ID | None = None,
        job_id: int | None = None,
        cluster: str | None = None,
        after: str | None = None,
    ) -> AsyncGenerator[AttemptUpdate, None]:
        try:
            workflow_pk = expect_global_id(str(workflow_id), "Workflow") if workflow_id is not None else None
        except GlobalIdError as exc:
            raise bad_input(str(exc)) from None

        def match(entry: ChangeFeedEntry) -> bool:
            return (
                entry.entity_id is not None
                and (workflow_pk is None or entry.workflow_id == workflow_pk)
                and (job_id is None or entry.slurm_job_id == job_id)
                and (not cluster or entry.cluster == cluster)
            )

        async for entries in _feed(info, ["attempt"], after, match, workflow_pk):
            for entry, row in await _rows(info, "attempt", entries):
                payload = entry.payload or {}
                yield AttemptUpdate(
                    position=str(entry.id),
                    changed=list(payload.get("changed") or []),
                    created=bool(payload.get("new")),
                    state=payload.get("state"),
                    attempt=Attempt(row=row),
                )

    @strawberry.subscription(description="Audit events as they are recorded, with the SPEC §7 filters.")
    async def audit_events(
        self, info: Info, filter: AuditEventFilter | None = None, after: str | None = None
    ) -> AsyncGenerator[AuditEventUpdate, None]:
        flt = audit_filter(filter)

        def match(entry: ChangeFeedEntry) -> bool:
            # Cheap checks on the feed entry first; the rest once the event is loaded.
            return (
                entry.entity_id is not None
                and (flt.slurm_job_id is None or entry.slurm_job_id == flt.slurm_job_id)
                and (flt.attempt_index is None or entry.attempt_index == flt.attempt_index)
            )

        async for entries in _feed(info, ["audit"], after, match):
            for entry, row in await _rows(info, "audit_event", entries):
                if _audit_matches(flt, row):
                    yield AuditEventUpdate(position=str(entry.id), event=audit_event(row))

    @strawberry.subscription(
        description="Advice as it is created, reviewed and reconciled; onlyActive skips inactive Advice."
    )
    async def advice_changes(
        self, info: Info, only_active: bool = False, job_id: int | None = None, after: str | None = None
    ) -> AsyncGenerator[AdviceUpdate, None]:
        def match(entry: ChangeFeedEntry) -> bool:
            return entry.entity_id is not None and (job_id is None or entry.slurm_job_id == job_id)

        async for entries in _feed(info, ["advice"], after, match):
            for entry, row in await _rows(info, "advice", entries):
                if only_active and not row.active:
                    continue
                yield AdviceUpdate(position=str(entry.id), advice=Advice(row=row))
