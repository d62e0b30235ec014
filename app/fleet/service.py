"""Write side of fleet-wide trust: the controller's gate (budgets, storms), node reputation, operator actions.

Every change is an audit event (and a feed entry through it); what needs a person is also a
notification-ready outbox row (app/notify).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.advice import queries as advice_queries
from app.advice.models import Advice
from app.audit import service as audit
from app.domain.decision.advice import Failure
from app.domain.fleetwide import notify as notify_rules
from app.domain.fleetwide import trust as rules
from app.fleet import queries
from app.fleet.models import BudgetExtension, ClusterPause, NodeBlame, NodeStanding, RecoveryHold, RestartGrant
from app.infra.config import Settings
from app.infra.db import utcnow
from app.notify import service as notify

MAX_NOTE = 1000
MAX_EXTRA = 1000


class FleetError(ValueError):
    """An operator action that cannot be taken (unknown Advice or node, nothing held, bad value)."""

    def __init__(self, message: str, *, not_found: bool = False) -> None:
        super().__init__(message)
        self.not_found = not_found


@dataclass(frozen=True)
class Held:
    """Why the controller must not begin this Advice now: a disposition reason and a sentence."""

    reason: str
    message: str


def budget_limits(settings: Settings) -> rules.BudgetLimits:
    """The operator's budgets from the settings."""
    return rules.BudgetLimits(
        workflow_restarts=settings.budget_workflow_restarts,
        workflow_window=settings.budget_workflow_window,
        cluster_restarts=settings.budget_cluster_restarts,
        cluster_window=settings.budget_cluster_window,
    )


def reputation_rules(settings: Settings) -> rules.ReputationRules:
    """The node-reputation rule from the settings."""
    return rules.ReputationRules(
        jobs=settings.node_suspect_jobs, window=settings.node_suspect_window, ttl=settings.node_suspect_ttl
    )


def shown_state(row: NodeStanding, now: dt.datetime) -> str:
    """A node's state as operators see it now (a suspicion past its TTL reads EXPIRED)."""
    if row.pinned:
        return rules.NODE_PINNED
    if row.suspect_until is not None:
        return rules.NODE_SUSPECT if row.suspect_until > now else rules.NODE_EXPIRED
    return rules.NODE_CLEARED if row.cleared_at is not None else rules.NODE_OK


# ---------------------------------------------------------------- the controller's gate


async def gate(
    session: AsyncSession, *, settings: Settings, advice: Advice, in_flight: bool, now: dt.datetime | None = None
) -> Held | None:
    """Before the controller begins an Advice in act mode: None to go on, or why it is held (storm, budget).

    An Advice whose first command was already sent (`in_flight`) always finishes: a storm or a
    budget never leaves a job requeue-held half way.
    """
    now = now or utcnow()
    if in_flight:
        return None
    pause = await queries.open_pause(session, cluster=advice.cluster)
    if pause is None:
        pause = await _detect_storm(session, settings=settings, cluster=advice.cluster, now=now)
    if pause is not None:
        return Held(rules.STORM_PAUSED, f"{pause.message} (pause {pause.id} since {pause.started_at:%H:%M:%S} UTC)")
    if advice.operation != "RESTART" or await queries.grant_of(session, advice_id=advice.id) is not None:
        return None
    limits = budget_limits(settings)
    workflow_id, workflow_key = await queries.workflow_of_job(session, job_id=advice.job_id)
    workflow_used = (
        await queries.grants_since(
            session,
            cluster=advice.cluster,
            workflow_id=workflow_id,
            since=now - dt.timedelta(seconds=limits.workflow_window),
        )
        if workflow_id is not None
        else 0
    )
    cluster_used = await queries.grants_since(
        session, cluster=advice.cluster, since=now - dt.timedelta(seconds=limits.cluster_window)
    )
    verdict = rules.budget_verdict(
        limits=limits,
        workflow_used=workflow_used,
        cluster_used=cluster_used,
        workflow_extra=await queries.extra_restarts(session, cluster=advice.cluster, workflow_id=workflow_id, now=now)
        if workflow_id is not None
        else 0,
        cluster_extra=await queries.extra_restarts(session, cluster=advice.cluster, workflow_id=None, now=now),
        workflow=workflow_key if workflow_id is not None else None,
        cluster=advice.cluster,
    )
    if verdict.allowed:
        session.add(
            RestartGrant(
                advice_id=advice.id,
                cluster=advice.cluster,
                workflow_id=workflow_id,
                job_id=advice.job_id,
                granted_at=now,
            )
        )
        hold = await queries.hold_of(session, advice_id=advice.id)
        if hold is not None and hold.released_at is None:  # the budget has room again (an extension)
            hold.released_at, hold.released_by, hold.release_note = now, "budget", "the budget had room again"
        await session.flush()
        return None
    await _hold(session, advice=advice, workflow_id=workflow_id, budget=verdict.budget or "", message=verdict.message)
    return Held(rules.BUDGET_EXCEEDED, verdict.message)


async def _hold(session: AsyncSession, *, advice: Advice, workflow_id: int | None, budget: str, message: str) -> None:
    if await queries.hold_of(session, advice_id=advice.id) is not None:
        return
    hold = RecoveryHold(
        advice_id=advice.id,
        cluster=advice.cluster,
        workflow_id=workflow_id,
        job_id=advice.job_id,
        slurm_job_id=advice.slurm_job_id,
        attempt_index=advice.attempt_index,
        budget=budget,
        message=message,
        created_at=utcnow(),
    )
    session.add(hold)
    await session.flush()
    await audit.record(
        session,
        component="controller",
        event_type="budget.exceeded",
        level="WARNING",
        message=f"Advice {advice.id} held, not carried out: {message}",
        payload={"adviceId": advice.id, "generation": advice.generation, "budget": budget, "holdId": hold.id},
        cluster=advice.cluster,
        slurm_job_id=advice.slurm_job_id,
        attempt_index=advice.attempt_index,
    )
    await notify.record(
        session,
        event=notify_rules.BUDGET_EXCEEDED,
        dedup_key=f"{notify_rules.BUDGET_EXCEEDED}:{advice.id}",
        cluster=advice.cluster,
        title=f"Recovery: restart of job {advice.slurm_job_id} held (recovery budget exceeded)",
        body=f"What happened: {message}\nAdvice {advice.id} (RESTART) waits for an operator to release it "
        "or extend the budget.",
        slurm_job_id=advice.slurm_job_id,
        attempt_index=advice.attempt_index,
        advice_id=advice.id,
        generation=advice.generation,
    )


async def _detect_storm(
    session: AsyncSession, *, settings: Settings, cluster: str, now: dt.datetime
) -> ClusterPause | None:
    if settings.storm_jobs <= 0:
        return None
    since = now - dt.timedelta(seconds=settings.storm_window)
    confirmed = await queries.last_confirmed_at(session, cluster=cluster)
    if confirmed is not None and confirmed > since:
        since = confirmed  # failures an operator already confirmed do not count again
    jobs = await queries.failing_jobs_since(session, cluster=cluster, since=since)
    if not rules.storm_detected(failing_jobs=len(jobs), threshold=settings.storm_jobs):
        return None
    message = rules.storm_message(failing_jobs=len(jobs), window=settings.storm_window, cluster=cluster)
    pause = ClusterPause(cluster=cluster, message=message, jobs=jobs[:200], started_at=now)
    session.add(pause)
    await session.flush()
    await audit.record(
        session,
        component="controller",
        event_type="storm.detected",
        level="ERROR",
        message=f"{message}; jobs {', '.join(str(j) for j in jobs[:20])}",
        payload={"pauseId": pause.id, "jobs": jobs[:200], "windowSeconds": settings.storm_window},
        cluster=cluster,
    )
    await notify.record(
        session,
        event=notify_rules.RESTART_STORM,
        dedup_key=f"{notify_rules.RESTART_STORM}:{cluster}:{pause.id}",
        cluster=cluster,
        title=f"Recovery: restart storm on cluster {cluster}, automatic action paused",
        body=f"What happened: {message}.\nJobs: {', '.join(str(j) for j in jobs[:50])}\n"
        "Confirm in the dashboard (or the confirmStorm mutation) to resume.",
    )
    return pause


# ---------------------------------------------------------------- operator actions on budgets and storms


def _note(text: str | None) -> str | None:
    cleaned = (text or "").strip()[:MAX_NOTE]
    return cleaned or None


async def _wake(session: AsyncSession, *, advice_ids: Sequence[int], now: dt.datetime) -> None:
    """Held Advice are looked at again at once (the controller re-runs its gate)."""
    for advice_id in advice_ids:
        advice = await session.get(Advice, advice_id)
        if advice is not None and advice.active:
            advice.next_reconcile_at = now


async def release_hold(session: AsyncSession, *, advice_id: int, user: str, note: str | None = None) -> RecoveryHold:
    """Let one Advice held past a budget be carried out (a restart granted by the operator)."""
    hold = await queries.hold_of(session, advice_id=advice_id)
    if hold is None:
        raise FleetError(f"Advice {advice_id} is not held by a recovery budget", not_found=True)
    if hold.released_at is not None:
        raise FleetError(f"the hold of Advice {advice_id} was already released by {hold.released_by}")
    now = utcnow()
    hold.released_at, hold.released_by, hold.release_note = now, user, _note(note)
    if await queries.grant_of(session, advice_id=advice_id) is None:
        session.add(
            RestartGrant(
                advice_id=advice_id,
                cluster=hold.cluster,
                workflow_id=hold.workflow_id,
                job_id=hold.job_id,
                granted_at=now,
                granted_by=user,
            )
        )
    await _wake(session, advice_ids=[advice_id], now=now)
    await session.flush()
    await audit.record(
        session,
        component="api",
        event_type="budget.released",
        message=f"{user} released Advice {advice_id} held by the {hold.budget} budget"
        + (f": {hold.release_note}" if hold.release_note else ""),
        payload={"adviceId": advice_id, "holdId": hold.id, "budget": hold.budget, "user": user},
        cluster=hold.cluster,
        slurm_job_id=hold.slurm_job_id,
        attempt_index=hold.attempt_index,
        actor=user,
    )
    return hold


async def extend_budget(
    session: AsyncSession,
    *,
    cluster: str,
    workflow_key: str | None,
    extra: int,
    user: str,
    settings: Settings,
    note: str | None = None,
) -> BudgetExtension:
    """Add `extra` automatic restarts to a workflow's (or the cluster's) budget for one window; held Advice re-check."""
    if not 1 <= extra <= MAX_EXTRA:
        raise FleetError(f"extra must be between 1 and {MAX_EXTRA}, got {extra}")
    workflow_id = None
    if workflow_key is not None:
        workflow_id = await queries.workflow_id_by_key(session, cluster=cluster, key=workflow_key)
        if workflow_id is None:
            raise FleetError(f"no workflow {workflow_key!r} on cluster {cluster!r}", not_found=True)
    window = settings.budget_workflow_window if workflow_id is not None else settings.budget_cluster_window
    now = utcnow()
    extension = BudgetExtension(
        cluster=cluster,
        workflow_id=workflow_id,
        extra=extra,
        expires_at=now + dt.timedelta(seconds=window),
        created_by=user,
        reason=_note(note),
        created_at=now,
    )
    session.add(extension)
    held = await queries.holds(session, cluster=cluster, only_open=True)
    await _wake(
        session,
        advice_ids=[h.advice_id for h in held if workflow_id is None or h.workflow_id == workflow_id],
        now=now,
    )
    await session.flush()
    scope = f"workflow {workflow_key}" if workflow_key is not None else f"cluster {cluster}"
    await audit.record(
        session,
        component="api",
        event_type="budget.extended",
        message=f"{user} added {extra} automatic restart(s) to the budget of {scope} until "
        f"{extension.expires_at:%Y-%m-%d %H:%M:%S} UTC" + (f": {extension.reason}" if extension.reason else ""),
        payload={"extensionId": extension.id, "workflow": workflow_key, "extra": extra, "user": user},
        cluster=cluster,
        workflow_id=workflow_id,
        actor=user,
    )
    return extension


async def confirm_storm(session: AsyncSession, *, cluster: str, user: str, note: str | None = None) -> ClusterPause:
    """An operator confirms a restart storm: automatic action on the cluster resumes (held Advice re-check)."""
    pause = await queries.open_pause(session, cluster=cluster)
    if pause is None:
        raise FleetError(f"automatic action on cluster {cluster!r} is not paused", not_found=True)
    now = utcnow()
    pause.confirmed_at, pause.confirmed_by, pause.confirm_note = now, user, _note(note)
    due = await advice_queries.due_advice_ids(
        session, cluster=cluster, now=now + dt.timedelta(days=3650), vetoed="VETOED", limit=1000
    )
    await _wake(session, advice_ids=due, now=now)
    await session.flush()
    await audit.record(
        session,
        component="api",
        event_type="storm.confirmed",
        level="WARNING",
        message=f"{user} confirmed the restart storm on cluster {cluster}; automatic action resumes"
        + (f": {pause.confirm_note}" if pause.confirm_note else ""),
        payload={"pauseId": pause.id, "user": user, "jobs": list(pause.jobs or ())},
        cluster=cluster,
        actor=user,
    )
    return pause


# ---------------------------------------------------------------- node reputation


async def note_failure(
    session: AsyncSession,
    *,
    settings: Settings,
    job_id: int,
    attempt_id: int,
    slurm_job_id: int,
    failure: Failure,
    now: dt.datetime | None = None,
) -> tuple[str, ...]:
    """Record the hardware/infrastructure blame of nodes one failure carries; the cluster's suspect nodes after it."""
    now = now or utcnow()
    cluster = settings.cluster
    if settings.node_suspect_jobs > 0 and rules.counts_as_node_evidence(outlook=failure.outlook, state=failure.state):
        for node in sorted({n.strip() for n in failure.implicated_nodes if n and n.strip()}):
            if await queries.blame_exists(session, cluster=cluster, node=node, attempt_id=attempt_id):
                continue
            session.add(
                NodeBlame(
                    cluster=cluster,
                    node=node,
                    job_id=job_id,
                    attempt_id=attempt_id,
                    slurm_job_id=slurm_job_id,
                    attempt_index=failure.attempt_index,
                    category=failure.category,
                    outlook=failure.outlook or "infrastructure",
                    evidence={"refs": list(failure.evidence_refs)[:10], "state": failure.state},
                    blamed_at=now,
                )
            )
            await session.flush()
            await _reassess(session, settings=settings, node=node, now=now, trigger=slurm_job_id)
    return await queries.suspect_nodes(session, cluster=cluster, now=now)


async def _standing(session: AsyncSession, *, cluster: str, node: str, now: dt.datetime) -> NodeStanding:
    row = await queries.standing(session, cluster=cluster, node=node)
    if row is None:
        row = NodeStanding(cluster=cluster, node=node, state=rules.NODE_OK, jobs=[], pinned=False, updated_at=now)
        session.add(row)
        await session.flush()
    return row


async def _reassess(session: AsyncSession, *, settings: Settings, node: str, now: dt.datetime, trigger: int) -> None:
    cluster = settings.cluster
    row = await _standing(session, cluster=cluster, node=node, now=now)
    blames = await queries.blames_of_node(session, cluster=cluster, node=node)
    verdict = rules.node_verdict(
        [rules.Blame(job_key=b.job_id, at=b.blamed_at) for b in blames],
        rules=reputation_rules(settings),
        now=now,
        pinned=row.pinned,
        cleared_at=row.cleared_at,
    )
    by_job = {b.job_id: b.slurm_job_id for b in blames}
    was_suspect = row.suspect_until is not None and row.suspect_until > now
    row.jobs = [by_job[j] for j in verdict.jobs if j in by_job]
    row.suspect_until = verdict.suspect_until if verdict.state in (rules.NODE_SUSPECT, rules.NODE_EXPIRED) else None
    row.state = verdict.state
    row.updated_at = now
    if verdict.state != rules.NODE_SUSPECT or was_suspect:
        return
    row.suspect_since = now
    jobs = ", ".join(str(j) for j in row.jobs)
    message = (
        f"node {node} is suspect for cluster {cluster}: hardware/infrastructure evidence blamed it in "
        f"{len(verdict.jobs)} distinct jobs ({jobs}) within {settings.node_suspect_window:g} s; later Advice for "
        f"any job excludes it until {verdict.suspect_until:%Y-%m-%d %H:%M:%S} UTC unless renewed"
    )
    await audit.record(
        session,
        component="advisor",
        event_type="node.suspect",
        level="WARNING",
        message=message,
        payload={"node": node, "jobs": row.jobs, "suspectUntil": verdict.suspect_until.isoformat()}
        if verdict.suspect_until
        else {"node": node, "jobs": row.jobs},
        cluster=cluster,
        slurm_job_id=trigger,
    )
    await notify.record(
        session,
        event=notify_rules.NODE_SUSPECT,
        dedup_key=f"{notify_rules.NODE_SUSPECT}:{cluster}:{node}:{now.isoformat()}",
        cluster=cluster,
        title=f"Recovery: node {node} on cluster {cluster} is suspect",
        body=f"What happened: {message}.",
    )


async def set_node(
    session: AsyncSession, *, cluster: str, node: str, action: str, user: str, note: str | None = None
) -> NodeStanding:
    """An operator clears a node (its blames so far no longer count), pins it (always excluded) or unpins it."""
    if action not in ("clear", "pin", "unpin"):
        raise FleetError(f"unknown node action {action!r}: clear, pin or unpin")
    node = node.strip()
    if not node or len(node) > 256:
        raise FleetError("a node name is 1 to 256 characters")
    now = utcnow()
    row = await queries.standing(session, cluster=cluster, node=node)
    if row is None:
        if action != "pin":
            raise FleetError(f"no evidence about node {node!r} on cluster {cluster!r}", not_found=True)
        row = await _standing(session, cluster=cluster, node=node, now=now)
    if action == "clear":
        row.pinned, row.cleared_at, row.suspect_until, row.state, row.jobs = False, now, None, rules.NODE_CLEARED, []
        if row.drain_status is not None:  # Recovery never resumes a node: the operator does, in Slurm
            row.drain_status, row.drain_message = None, f"cleared by {user}; a drained node is resumed in Slurm"
    elif action == "pin":
        row.pinned, row.state = True, rules.NODE_PINNED
    else:
        row.pinned = False
        row.state = shown_state(row, now)
    row.changed_by, row.updated_at = user, now
    await session.flush()
    cleaned = _note(note)
    verbs = {"clear": "cleared", "pin": "pinned", "unpin": "unpinned"}
    await audit.record(
        session,
        component="api",
        event_type=f"node.{verbs[action]}",
        level="WARNING" if action == "pin" else "INFO",
        message=f"{user} {verbs[action]} node {node} on cluster {cluster}" + (f": {cleaned}" if cleaned else ""),
        payload={"node": node, "action": action, "user": user, "note": cleaned},
        cluster=cluster,
        actor=user,
    )
    return row


# ---------------------------------------------------------------- drain (behind RECOVERY_NODE_DRAIN)


async def note_drain_sent(session: AsyncSession, *, row: NodeStanding, took_ms: float) -> None:
    """Slurm took the drain command: say how long it took while the drain waits to be seen."""
    row.drain_message = f"sent in {took_ms:.0f} ms; waiting for Slurm to show it drained"


async def record_drain(
    session: AsyncSession,
    *,
    row: NodeStanding,
    status: str,
    message: str,
    partition: str | None,
    command: str,
    now: dt.datetime | None = None,
) -> None:
    """Record a drain (shadow, sent, verified, refused or failed) of a suspect node, as its row and an audit event."""
    now = now or utcnow()
    if (row.drain_status, row.drain_message) == (status, message):
        return
    row.drain_status, row.drain_message, row.drain_partition, row.updated_at = status, message[:4000], partition, now
    if status == rules.DRAIN_VERIFIED:
        row.drained_at = now
    event = {
        rules.DRAIN_SHADOW: "node.would_drain",
        rules.DRAIN_SENT: "node.drain_sent",
        rules.DRAIN_VERIFIED: "node.drained",
        rules.DRAIN_REFUSED: "node.drain_refused",
        rules.DRAIN_FAILED: "node.drain_failed",
    }[status]
    payload: dict[str, Any] = {"node": row.node, "status": status, "command": command, "partition": partition}
    await audit.record(
        session,
        component="controller",
        event_type=event,
        level="INFO" if status in (rules.DRAIN_SHADOW, rules.DRAIN_VERIFIED, rules.DRAIN_SENT) else "WARNING",
        message=f"{command}: {message}",
        payload=payload,
        cluster=row.cluster,
    )
