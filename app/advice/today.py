"""The operator's day: what happened on the cluster(s) in a time range and what needs someone (the home page)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, or_, select, union
from sqlalchemy.ext.asyncio import AsyncSession

from app.advice.models import Advice
from app.domain.admission.mode import ENROLLED
from app.domain.fleetwide.trust import HOLD_REASONS
from app.evidence.models import Anomaly
from app.fleet.models import ClusterPause, NodeStanding
from app.jobs.models import Job

NEEDS_LIMIT = 20  # each "Needs you" list shows at most this many rows (the counters say how many there are)
# Refusal reasons that point at a slip of the keyboard (admission/mode.py admission, admission/policy.py).
LIKELY_TYPO = ("differ only in case", "did you mean")


@dataclass
class Day:
    """Counters of a time range and the short lists of things that need an operator."""

    since: dt.datetime
    counts: dict[str, int] = field(default_factory=dict)
    waiting: list[Advice] = field(default_factory=list)  # act-mode Advice held for an operator (budget, storm)
    storms: list[ClusterPause] = field(default_factory=list)
    suspect: list[NodeStanding] = field(default_factory=list)
    typos: list[Job] = field(default_factory=list)
    stopped: list[Advice] = field(default_factory=list)

    @property
    def needs_someone(self) -> int:
        """How many things on the lists wait for a person (the page's headline number)."""
        return len(self.waiting) + len(self.storms) + len(self.suspect) + len(self.typos) + len(self.stopped)


def _stopped() -> Any:
    """Act-mode Advice that ended a run: a TERMINATE, a veto or Advice that could not converge."""
    return (Advice.mode == "act") & (
        (Advice.operation == "TERMINATE") | (Advice.disposition == "ABANDONED") | (Advice.review == "VETOED")
    )


def _waiting() -> Any:
    """Act-mode Advice that waits for an operator: held by a recovery budget or a restart storm."""
    return (Advice.mode == "act") & Advice.active.is_(True) & Advice.disposition_reason.in_(HOLD_REASONS)


async def operator_day(session: AsyncSession, *, since: dt.datetime, now: dt.datetime) -> Day:
    """Counters since `since` and what needs someone now: a fixed number of statements whatever the data."""
    decided_since = Advice.created_at >= since
    failures = union(
        select(Anomaly.attempt_id).where(Anomaly.detected_at >= since, Anomaly.kind.in_(("CRASH", "NO_PROGRESS"))),
        select(Advice.attempt_id).where(decided_since),
    ).subquery()
    day = Day(since=since)
    row = (
        await session.execute(
            select(
                select(func.count()).select_from(failures).scalar_subquery(),
                select(func.count())
                .where(
                    decided_since,
                    Advice.mode == "act",
                    Advice.operation == "RESTART",
                    Advice.disposition == "CONVERGED",
                    or_(Advice.review.is_(None), Advice.review != "VETOED"),
                )
                .scalar_subquery(),
                select(func.count()).where(decided_since, _stopped()).scalar_subquery(),
                select(func.count()).where(decided_since, Advice.mode == "observe").scalar_subquery(),
                select(func.count()).where(_waiting()).scalar_subquery(),
                select(func.count()).where(Job.created_at >= since, Job.enrolment != ENROLLED).scalar_subquery(),
                select(func.count())
                .where(or_(NodeStanding.pinned.is_(True), NodeStanding.suspect_until > now))
                .scalar_subquery(),
            )
        )
    ).one()
    keys = ("failures", "recovered", "stopped", "observe_only", "held", "refused", "suspect_nodes")
    day.counts = dict(zip(keys, (int(n or 0) for n in row), strict=True))
    day.waiting = list(
        (await session.scalars(select(Advice).where(_waiting()).order_by(Advice.id.desc()).limit(NEEDS_LIMIT))).all()
    )
    day.storms = list(
        (
            await session.scalars(
                select(ClusterPause).where(ClusterPause.confirmed_at.is_(None)).order_by(ClusterPause.id.desc())
            )
        ).all()
    )
    day.counts["held"] += len(day.storms)
    day.suspect = list(
        (
            await session.scalars(
                select(NodeStanding)
                .where(NodeStanding.suspect_until > now, NodeStanding.suspect_since >= since)
                .order_by(NodeStanding.suspect_since.desc())
                .limit(NEEDS_LIMIT)
            )
        ).all()
    )
    typo = or_(*(Job.enrolment_reason.contains(words) for words in LIKELY_TYPO))
    day.typos = list(
        (
            await session.scalars(
                select(Job)
                .where(Job.created_at >= since, Job.enrolment != ENROLLED, typo)
                .order_by(Job.id.desc())
                .limit(NEEDS_LIMIT)
            )
        ).all()
    )
    day.stopped = list(
        (
            await session.scalars(
                select(Advice).where(decided_since, _stopped()).order_by(Advice.id.desc()).limit(NEEDS_LIMIT)
            )
        ).all()
    )
    return day
