"""Read side of the audit log: SPEC §7 filters, keyset pages, events by id and a job's timeline events."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.audit.models import AuditEvent
from app.audit.service import COMPONENTS, LEVELS
from app.domain.control.identity import MAX_ATTEMPT_INDEX, MAX_SLURM_JOB_ID
from app.domain.edge.bounds import BoundsError, parse_int
from app.infra.pagination import Page, PageRequest, paginate
from app.infra.sql import by_ids

__all__ = ["COMPONENTS", "LEVELS", "AuditFilter", "AuditFilterError", "parse_job_reference"]

# A page reads plain column values: no ORM objects (identity map, instrumentation) on the read path.
_C = AuditEvent.__table__.c
_PAGE = select(*AuditEvent.__table__.columns)  # every page's statement starts from it (immutable: built once)
TIMELINE_EVENT_TYPES = ("attempt.registered", "attempt.state_changed")
# Also drawn on the timeline, as checkpoint marks: the check of the newest save before release.
CHECKPOINT_CHECK_EVENT = "checkpoint.checked"
VERIFICATION_PREFIX = "reconciliation."
MAX_TIMELINE_EVENTS = 2000


class AuditFilterError(ValueError):
    """An audit query filter that cannot be applied (unknown level, bad attempt reference, …)."""


@dataclass(frozen=True)
class AuditFilter:
    """SPEC §7 filters; every field is optional and they combine with AND."""

    slurm_job_id: int | None = None
    attempt_index: int | None = None
    component: str | None = None
    event_type: str | None = None
    level: str | None = None
    produced_after: dt.datetime | None = None
    produced_before: dt.datetime | None = None
    cluster: str | None = None
    workflow_id: int | None = None
    # The dashboard's type box: `checkpoint` or `checkpoint.` matches every checkpoint.* type (and `checkpoint`).
    event_type_family: str | None = None

    def __post_init__(self) -> None:
        if self.level is not None and self.level not in LEVELS:
            raise AuditFilterError(f"level must be one of {', '.join(LEVELS)}")
        if self.attempt_index is not None and self.slurm_job_id is None:
            raise AuditFilterError("an attempt index needs a job id")
        if self.attempt_index is not None and self.attempt_index < 0:
            raise AuditFilterError("attempt index must not be negative")


def parse_job_reference(text: str) -> tuple[int, int | None]:
    """Parse the dashboard's job box: `12345` (all attempts) or `12345/0` (one attempt)."""
    raw = text.strip()
    job, sep, attempt = raw.partition("/")
    try:
        job_id = parse_int(job.strip(), "job id", minimum=1, maximum=MAX_SLURM_JOB_ID)
        index = parse_int(attempt.strip(), "attempt index", maximum=MAX_ATTEMPT_INDEX) if sep else None
    except BoundsError as exc:
        raise AuditFilterError(f"expected a job id or job_id/attempt_index ({exc})") from None
    return job_id, index


def _family(text: str) -> Any:
    family = text.rstrip(".*")
    # LIKE with the wildcards of the text escaped (a range would follow PostgreSQL's collation, not bytes).
    return or_(_C.event_type == family, _C.event_type.startswith(family + ".", autoescape=True))


# Each filter with the condition it adds, in this order; it applies when given (not None, and not empty text).
# Core columns: the same SQL as the ORM attributes, built without the ORM's comparator layers (per request).
_CONDITIONS: tuple[tuple[str, Any], ...] = (
    ("slurm_job_id", lambda v: _C.slurm_job_id == v),
    ("attempt_index", lambda v: _C.attempt_index == v),
    ("component", lambda v: _C.component == v),
    ("event_type", lambda v: _C.event_type == v),
    ("event_type_family", _family),
    ("level", lambda v: _C.level == v),
    ("produced_after", lambda v: _C.produced_at >= v),
    ("produced_before", lambda v: _C.produced_at < v),
    ("cluster", lambda v: _C.cluster == v),
    ("workflow_id", lambda v: _C.workflow_id == v),
)


def _given(flt: AuditFilter) -> list[tuple[str, Any, Any]]:
    """(name, condition, value) of the filters that apply."""
    return [
        (name, condition, value)
        for name, condition in _CONDITIONS
        if (value := getattr(flt, name)) is not None and value != ""
    ]


def _filtered(query: Any, flt: AuditFilter) -> Any:
    for _, condition, value in _given(flt):
        query = query.where(condition(value))
    return query


async def query(
    session: AsyncSession,
    *,
    filter: AuditFilter,
    page: PageRequest,
    descending: bool = True,
) -> Page[Any]:
    """One keyset page of matching events ordered by (produced_at, id), as Core rows (the columns as attributes)."""
    return await paginate(
        session,
        _filtered(_PAGE, filter),
        kind="audit",
        columns=(_C.produced_at, _C.id),
        descending=descending,
        request=page,
        rows=True,
    )


async def count_matching(session: AsyncSession, *, filter: AuditFilter, cap: int = 10_000) -> tuple[int, bool]:
    """How many events match, counting at most `cap` (True when there are more)."""
    inner = _filtered(select(AuditEvent.id), filter).limit(cap + 1).subquery()
    found = int(await session.scalar(select(func.count()).select_from(inner)) or 0)
    return min(found, cap), found > cap


async def event_type_counts(session: AsyncSession) -> list[tuple[str, int]]:
    """Every event type that occurs, with how often (the type box's suggestions)."""
    rows = await session.execute(
        select(AuditEvent.event_type, func.count()).group_by(AuditEvent.event_type).order_by(AuditEvent.event_type)
    )
    return [(str(t), int(n)) for t, n in rows.all()]


async def get(session: AsyncSession, *, event_id: int) -> AuditEvent | None:
    """One event by id."""
    return await session.get(AuditEvent, event_id)


async def events_by_ids(session: AsyncSession, *, ids: Sequence[int]) -> dict[int, AuditEvent]:
    """Events by id, in one statement (the API's node loader batches through it)."""
    return await by_ids(session, AuditEvent, ids)


async def timeline_events(
    session: AsyncSession, *, cluster: str, slurm_job_id: int, since: dt.datetime | None = None
) -> list[AuditEvent]:
    """A job's state changes and reconciliation verdicts (oldest first) for the timeline, bounded in number."""
    query = select(AuditEvent).where(
        AuditEvent.slurm_job_id == slurm_job_id,
        or_(AuditEvent.cluster == cluster, AuditEvent.cluster.is_(None)),
        or_(
            AuditEvent.event_type.in_((*TIMELINE_EVENT_TYPES, CHECKPOINT_CHECK_EVENT)),
            AuditEvent.event_type.like(VERIFICATION_PREFIX + "%"),
        ),
    )
    if since is not None:
        # A reused Slurm job id must not lend its old history to the new job record.
        query = query.where(AuditEvent.produced_at >= since)
    query = query.order_by(AuditEvent.produced_at, AuditEvent.id).limit(MAX_TIMELINE_EVENTS)
    return list((await session.scalars(query)).all())
