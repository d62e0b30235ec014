"""Read side of Advice and its reconciliation milestones (shared by API and dashboard)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.advice.models import Advice, SchedulerAction
from app.jobs.models import Job
from app.pagination import Page, PageRequest, paginate


@dataclass(frozen=True)
class AdviceFilter:
    """Advice list filters; `only_active` keeps Advice that may still need reconciliation."""

    only_active: bool = False
    slurm_job_id: int | None = None
    cluster: str | None = None
    workflow_id: int | None = None


async def list_advice(session: AsyncSession, *, filter: AdviceFilter, page: PageRequest) -> Page[Advice]:
    """One page of Advice, newest first."""
    query = select(Advice)
    if filter.only_active:
        query = query.where(Advice.active.is_(True))
    if filter.cluster:
        query = query.where(Advice.cluster == filter.cluster)
    if filter.slurm_job_id is not None or filter.workflow_id is not None:
        # Through the job records, so the (job_id, id) index serves the page.
        jobs = select(Job.id)
        if filter.slurm_job_id is not None:
            jobs = jobs.where(Job.slurm_job_id == filter.slurm_job_id)
        if filter.workflow_id is not None:
            jobs = jobs.where(Job.workflow_id == filter.workflow_id)
        query = query.where(Advice.job_id.in_(jobs.scalar_subquery()))
    return await paginate(
        session, query, kind="advice", columns=(Advice.id,), descending=True, request=page, key_of=lambda a: (a.id,)
    )


async def get_advice(session: AsyncSession, *, advice_id: int) -> Advice | None:
    """One Advice by id."""
    return await session.get(Advice, advice_id)


async def advice_by_ids(session: AsyncSession, *, ids: Sequence[int]) -> dict[int, Advice]:
    """Advice by id, in one statement."""
    if not ids:
        return {}
    rows = (await session.scalars(select(Advice).where(Advice.id.in_(list(set(ids)))))).all()
    return {row.id: row for row in rows}


async def advice_of_attempts(session: AsyncSession, *, attempt_ids: Sequence[int]) -> dict[int, Advice]:
    """The Advice of each attempt that has one (at most one per attempt; newer decisions bump its generation)."""
    if not attempt_ids:
        return {}
    rows = (await session.scalars(select(Advice).where(Advice.attempt_id.in_(list(set(attempt_ids)))))).all()
    return {row.attempt_id: row for row in rows}


async def milestones_of_advice(session: AsyncSession, *, advice_ids: Sequence[int]) -> dict[int, list[SchedulerAction]]:
    """Each Advice's scheduler actions (milestones) in the order they were taken, in one statement."""
    result: dict[int, list[SchedulerAction]] = {advice_id: [] for advice_id in advice_ids}
    if not advice_ids:
        return result
    query = (
        select(SchedulerAction)
        .where(SchedulerAction.advice_id.in_(list(set(advice_ids))))
        .order_by(SchedulerAction.advice_id, SchedulerAction.id)
    )
    for row in (await session.scalars(query)).all():
        result[row.advice_id].append(row)
    return result
