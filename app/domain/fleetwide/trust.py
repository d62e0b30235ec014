"""Fleet-wide trust rules (pure): recovery budgets, restart storms, node reputation across jobs, drain limits.

Budgets count automatic restarts the controller began (one grant per Advice) in sliding windows;
a storm is many distinct jobs failing on one cluster within a window; a node is suspect for the
cluster when hardware/infrastructure evidence blamed it in K distinct jobs within W seconds, until
its TTL after the newest such blame runs out (or an operator pins or clears it).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from app.domain.decision.rootcause import INFRASTRUCTURE

# Disposition reasons of Advice held by these rules (PENDING, still active, not carried out).
BUDGET_EXCEEDED = "BUDGET_EXCEEDED"
STORM_PAUSED = "STORM_PAUSED"
HOLD_REASONS = (BUDGET_EXCEEDED, STORM_PAUSED)
# Which budget held an Advice.
WORKFLOW_BUDGET, CLUSTER_BUDGET = "workflow", "cluster"

# Node states shown to operators.
NODE_OK, NODE_SUSPECT, NODE_PINNED, NODE_CLEARED, NODE_EXPIRED = "OK", "SUSPECT", "PINNED", "CLEARED", "EXPIRED"
# Drain records of a node.
DRAIN_OFF, DRAIN_SHADOW, DRAIN_SENT, DRAIN_VERIFIED, DRAIN_REFUSED, DRAIN_FAILED = (
    "OFF",
    "SHADOW",
    "SENT",
    "DRAINED",
    "REFUSED",
    "FAILED",
)
DRAIN_REASON_PREFIX = "recovery: "


@dataclass(frozen=True)
class BudgetLimits:
    """The operator's budgets: restarts per workflow and per cluster in their windows (0 restarts: no limit)."""

    workflow_restarts: int = 3
    workflow_window: float = 3600.0
    cluster_restarts: int = 20
    cluster_window: float = 600.0


@dataclass(frozen=True)
class BudgetVerdict:
    """Whether one more automatic restart fits; when not, which budget and a sentence for the operator."""

    allowed: bool
    budget: str | None = None
    message: str = ""


def _window(seconds: float) -> str:
    if seconds % 3600 == 0 and seconds >= 3600:
        hours = int(seconds // 3600)
        return f"{hours} hour{'s' if hours != 1 else ''}"
    if seconds % 60 == 0 and seconds >= 60:
        minutes = int(seconds // 60)
        return f"{minutes} minute{'s' if minutes != 1 else ''}"
    return f"{seconds:g} s"


def budget_verdict(
    *,
    limits: BudgetLimits,
    workflow_used: int,
    cluster_used: int,
    workflow_extra: int = 0,
    cluster_extra: int = 0,
    workflow: str | None = None,
    cluster: str = "",
) -> BudgetVerdict:
    """One more automatic restart is allowed while both budgets (plus operator extensions) have room."""
    workflow_budget = (limits.workflow_restarts if workflow is not None else 0, limits.workflow_window)
    budgets = (
        (WORKFLOW_BUDGET, f"workflow {workflow}", *workflow_budget, workflow_used, workflow_extra),
        (
            CLUSTER_BUDGET,
            f"cluster {cluster}",
            limits.cluster_restarts,
            limits.cluster_window,
            cluster_used,
            cluster_extra,
        ),
    )
    for budget, who, restarts, window, used, extra in budgets:
        if restarts > 0 and used >= restarts + max(0, extra):
            granted = f" + {extra} granted by an operator" if extra > 0 else ""
            return BudgetVerdict(
                False,
                budget,
                f"{who} already had {used} automatic restart(s) in the last {_window(window)} (budget "
                f"{restarts}{granted}, RECOVERY_BUDGET_{budget.upper()}_RESTARTS); held for an operator to release "
                "or extend",
            )
    return BudgetVerdict(True)


def storm_detected(*, failing_jobs: int, threshold: int) -> bool:
    """A restart storm: at least `threshold` distinct jobs failed within the window (threshold 0: never)."""
    return threshold > 0 and failing_jobs >= threshold


def storm_message(*, failing_jobs: int, window: float, cluster: str) -> str:
    """The sentence a storm pause carries."""
    return (
        f"restart storm on cluster {cluster}: {failing_jobs} distinct jobs failed within {_window(window)} "
        "(RECOVERY_STORM_JOBS); automatic action is paused cluster-wide until an operator confirms"
    )


# ---------------------------------------------------------------- node reputation


@dataclass(frozen=True)
class ReputationRules:
    """K distinct jobs within W seconds make a node suspect for TTL seconds after its newest blame (K 0: off)."""

    jobs: int = 3
    window: float = 86400.0
    ttl: float = 86400.0


@dataclass(frozen=True)
class Blame:
    """Hardware/infrastructure evidence that named a node in one job's attempt."""

    job_key: int  # the job's id: distinct jobs are what counts
    at: dt.datetime


@dataclass(frozen=True)
class NodeVerdict:
    """A node's standing: state, until when it is suspect, and the jobs that count towards it."""

    state: str
    suspect_until: dt.datetime | None
    jobs: tuple[int, ...]


def counts_as_node_evidence(*, outlook: str | None, state: str | None = None) -> bool:
    """Only hardware/infrastructure evidence (an Xid, a node failure, a fabric error) hurts a node's reputation."""
    return outlook == INFRASTRUCTURE or (state or "").upper() == "NODE_FAIL"


def node_verdict(
    blames: Sequence[Blame],
    *,
    rules: ReputationRules,
    now: dt.datetime,
    pinned: bool = False,
    cleared_at: dt.datetime | None = None,
) -> NodeVerdict:
    """Suspect while K distinct jobs blamed it within W of each other and TTL has not passed since the last."""
    counted = sorted((b for b in blames if cleared_at is None or b.at > cleared_at), key=lambda b: b.at)
    recent = tuple(sorted({b.job_key for b in counted if (now - b.at).total_seconds() <= rules.window}))
    if pinned:
        return NodeVerdict(NODE_PINNED, None, recent)
    suspect_until = _suspect_until(counted, rules)
    if suspect_until is not None and suspect_until > now:
        return NodeVerdict(NODE_SUSPECT, suspect_until, recent)
    if suspect_until is not None:
        return NodeVerdict(NODE_EXPIRED, suspect_until, recent)
    if cleared_at is not None and not counted:
        return NodeVerdict(NODE_CLEARED, None, recent)
    return NodeVerdict(NODE_OK, None, recent)


def _suspect_until(blames: Sequence[Blame], rules: ReputationRules) -> dt.datetime | None:
    """The latest expiry over every moment the K-jobs-within-W rule held (a newer blame renews it)."""
    if rules.jobs <= 0:
        return None
    until: dt.datetime | None = None
    for i, last in enumerate(blames):
        jobs = {b.job_key for b in blames[: i + 1] if (last.at - b.at).total_seconds() <= rules.window}
        if len(jobs) >= rules.jobs:
            until = last.at + dt.timedelta(seconds=rules.ttl)
        elif until is not None and last.at <= until:
            until = max(until, last.at + dt.timedelta(seconds=rules.ttl))  # renewed while still suspect
    return until


def _clean(nodes: Iterable[str]) -> set[str]:
    return {n.strip() for n in nodes if isinstance(n, str) and n.strip()}


def with_suspects(
    own: Sequence[str], suspects: Iterable[str], partition_nodes: Iterable[str] | None
) -> tuple[tuple[str, ...], str | None]:
    """Add the cluster's suspect nodes to a job's own exclusions, never so many that the partition has none left.

    Suspects outside the job's partition are not named; when adding all of them would cover the
    partition, as many as fit are added (sorted) and a sentence says which were left out.
    """
    own_set = _clean(own)
    partition = _clean(partition_nodes) if partition_nodes is not None else None
    extra = sorted(_clean(suspects) - own_set)
    if partition is not None:
        extra = [n for n in extra if n in partition]
    if not extra:
        return tuple(sorted(own_set)), None
    added: list[str] = []
    for node in extra:
        if partition is not None and partition <= own_set | set(added) | {node}:
            continue
        added.append(node)
    left = [n for n in extra if n not in added]
    note = f"Also excluding {', '.join(added)}: suspect for the cluster (blamed in several jobs)." if added else None
    if left:
        cut = f"Suspect node(s) {', '.join(left)} are not excluded: that would leave no node in the partition."
        note = f"{note} {cut}" if note else cut
    return tuple(sorted(own_set | set(added))), note


# ---------------------------------------------------------------- drain


def drain_capacity(*, partition_size: int, max_fraction: float) -> int:
    """How many nodes of a partition Recovery may keep drained at once (floor; never the whole partition)."""
    if partition_size <= 1 or max_fraction <= 0:
        return 0
    return min(partition_size - 1, math.floor(partition_size * max_fraction + 1e-9))


def drain_allowed(
    *, node: str, partition_nodes: Sequence[str], drained: Iterable[str], max_fraction: float
) -> tuple[bool, str]:
    """Whether draining `node` keeps Recovery's drains within the fraction of the partition; and why."""
    members = _clean(partition_nodes)
    already = _clean(drained) & members
    if node in already:
        return False, f"{node} is already drained by Recovery"
    capacity = drain_capacity(partition_size=len(members), max_fraction=max_fraction)
    if len(already) + 1 > capacity:
        return False, (
            f"draining {node} would make {len(already) + 1} of {len(members)} node(s) drained by Recovery; "
            f"RECOVERY_NODE_DRAIN_MAX_FRACTION={max_fraction:g} allows {capacity}"
        )
    return True, f"{len(already) + 1} of {len(members)} node(s) drained by Recovery (at most {capacity})"


def drain_reason(*, node: str, jobs: Sequence[int]) -> str:
    """The Reason= Slurm shows for a node Recovery drained (so people know who did it and why)."""
    listed = ",".join(str(j) for j in list(jobs)[:5])
    return f"{DRAIN_REASON_PREFIX}suspect after hardware errors in jobs {listed}"[:120]
