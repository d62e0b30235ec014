"""The operator's day: what happened on the cluster(s) in a time range and what needs someone (the home page)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, or_, select, true, union
from sqlalchemy.ext.asyncio import AsyncSession

from app.advice.models import Advice
from app.domain.admission.mode import ENROLLED
from app.domain.fleetwide.trust import HOLD_REASONS
from app.evidence.models import Anomaly
from app.fleet.models import ClusterPause, NodeStanding
from app.jobs.models import Attempt, Job

MAX_HOURS = 8760  # the longest range the APIs accept (a year)
NEEDS_LIMIT = 20  # each "Needs you" list shows at most this many rows (the counters say how many there are)
# Refusal reasons that point at a slip of the keyboard (admission/mode.py admission, admission/policy.py).
LIKELY_TYPO = ("differ only in case", "did you mean")


@dataclass(frozen=True, slots=True)
class Need:
    """One thing on the "Needs you" list, as the APIs show it (the home page draws the same rows)."""

    kind: str  # one of NEED_KINDS
    cluster: str
    at: dt.datetime | None
    title: str
    detail: str
    dashboard_path: str  # below the service root (RECOVERY_URL_PREFIX not included)
    slurm_job_id: int | None = None
    attempt_index: int | None = None
    advice_id: int | None = None
    node: str | None = None


NEED_KINDS = ("storm", "held", "node", "refused", "stopped")


@dataclass
class Day:
    """Counters of a time range and the short lists of things that need an operator."""

    since: dt.datetime
    hours: int = 24
    cluster: str | None = None
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

    @property
    def needs(self) -> list[Need]:
        """The "Needs you" list in the home page's order: storms, held restarts, nodes, refusals, stopped runs."""
        return [
            *(_storm(p) for p in self.storms),
            *(_held(a) for a in self.waiting),
            *(_node(n) for n in self.suspect),
            *(_typo(j) for j in self.typos),
            *(_stopped_run(a) for a in self.stopped),
        ]


def _storm(p: ClusterPause) -> Need:
    return Need(
        "storm",
        p.cluster,
        p.started_at,
        f"Restart storm on cluster {p.cluster}",
        "automatic action is paused until an operator confirms",
        f"/dashboard/nodes#storm-{p.id}",
    )


def _held(a: Advice) -> Need:
    reason = (a.disposition_reason or "held").replace("_", " ").lower()
    title = f"{a.operation} of job {a.slurm_job_id}/{a.attempt_index} is held ({reason})"
    return _of_advice("held", a, title, a.disposition_message or "it waits for an operator to release it", "#advice")


def _node(n: NodeStanding) -> Need:
    until = n.suspect_until.isoformat(timespec="seconds") if n.suspect_until else "an operator clears it"
    return Need(
        "node",
        n.cluster,
        n.suspect_since,
        f"Node {n.node} turned suspect",
        f"later Advice excludes it until {until}",
        "/dashboard/nodes",
        node=n.node,
    )


def _typo(j: Job) -> Need:
    user = f" (user {j.user})" if j.user else ""
    return Need(
        "refused",
        j.cluster,
        j.created_at,
        f"Job {j.slurm_job_id} was refused{user}, probably a typo",
        j.enrolment_reason or "",
        f"/dashboard/jobs/{j.slurm_job_id}",
        j.slurm_job_id,
    )


def _stopped_run(a: Advice) -> Need:
    title = f"Run stopped: job {a.slurm_job_id}/{a.attempt_index}"
    return _of_advice("stopped", a, title, f"{a.reason} Its user must resubmit to continue.")


def _of_advice(kind: str, a: Advice, title: str, detail: str, anchor: str = "") -> Need:
    """A need about one Advice: dated by it, linked to its attempt's page (at `anchor`)."""
    path = f"/dashboard/jobs/{a.slurm_job_id}/attempts/{a.attempt_index}{anchor}"
    return Need(kind, a.cluster, a.created_at, title, detail, path, a.slurm_job_id, a.attempt_index, a.id)


def _on(cluster: str | None) -> Any:
    """A condition on a row's cluster column: that cluster, or any."""
    return lambda column: column == cluster if cluster else true()


def _stopped() -> Any:
    """Act-mode Advice that ended a run: a TERMINATE, a veto or Advice that could not converge."""
    return (Advice.mode == "act") & (
        (Advice.operation == "TERMINATE") | (Advice.disposition == "ABANDONED") | (Advice.review == "VETOED")
    )


def _waiting() -> Any:
    """Act-mode Advice that waits for an operator: held by a recovery budget or a restart storm."""
    return (Advice.mode == "act") & Advice.active.is_(True) & Advice.disposition_reason.in_(HOLD_REASONS)


async def operator_day(
    session: AsyncSession, *, since: dt.datetime, now: dt.datetime, cluster: str | None = None
) -> Day:
    """Counters since `since` and what needs someone now (on one cluster, or all): a fixed number of statements."""
    on = _on(cluster)
    decided_since = (Advice.created_at >= since) & on(Advice.cluster)
    failures = union(
        select(Anomaly.attempt_id)
        .join(Attempt, Attempt.id == Anomaly.attempt_id)
        .where(Anomaly.detected_at >= since, Anomaly.kind.in_(("CRASH", "NO_PROGRESS")), on(Attempt.cluster)),
        select(Advice.attempt_id).where(decided_since),
    ).subquery()
    day = Day(since=since, hours=round((now - since).total_seconds() / 3600), cluster=cluster)
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
                select(func.count()).where(_waiting(), on(Advice.cluster)).scalar_subquery(),
                select(func.count())
                .where(Job.created_at >= since, Job.enrolment != ENROLLED, on(Job.cluster))
                .scalar_subquery(),
                select(func.count())
                .where(or_(NodeStanding.pinned.is_(True), NodeStanding.suspect_until > now), on(NodeStanding.cluster))
                .scalar_subquery(),
            )
        )
    ).one()
    keys = ("failures", "recovered", "stopped", "observe_only", "held", "refused", "suspect_nodes")
    day.counts = dict(zip(keys, (int(n or 0) for n in row), strict=True))
    day.waiting = list(
        (
            await session.scalars(
                select(Advice).where(_waiting(), on(Advice.cluster)).order_by(Advice.id.desc()).limit(NEEDS_LIMIT)
            )
        ).all()
    )
    day.storms = list(
        (
            await session.scalars(
                select(ClusterPause)
                .where(ClusterPause.confirmed_at.is_(None), on(ClusterPause.cluster))
                .order_by(ClusterPause.id.desc())
            )
        ).all()
    )
    day.counts["held"] += len(day.storms)
    day.suspect = list(
        (
            await session.scalars(
                select(NodeStanding)
                .where(NodeStanding.suspect_until > now, NodeStanding.suspect_since >= since, on(NodeStanding.cluster))
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
                .where(Job.created_at >= since, Job.enrolment != ENROLLED, typo, on(Job.cluster))
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
