"""Write side of Advice and its scheduler actions (milestones); every change is an audit event and a feed entry."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.advice import queries
from app.advice.models import Advice, SchedulerAction
from app.audit import service as audit
from app.domain.admission.mode import ACT, ModeDecision
from app.domain.control.planner import OBSERVE_RECHECK, Disposition, Milestone, Step, StepKind
from app.domain.decision.advice import Decision, Operation, advice_changed, advice_record, merge_signals
from app.domain.decision.gate import DECIDED_IN_OBSERVE_TEXT, GateReason
from app.evidence.models import Anomaly
from app.feed import service as feed
from app.infra import metrics
from app.infra.db import utcnow
from app.jobs.models import Attempt
from app.notify import service as notify

VETOED = "VETOED"  # an operator's veto (app/advice/review.py): the controller must never act on it
APPROVED = "APPROVED"  # an operator's approval
CREATED, UPDATED, UNCHANGED, NOT_NEEDED, KEPT_VETOED = "created", "updated", "unchanged", "not_needed", "kept_vetoed"
# Milestone statuses the planner reads; FAILED and SHADOW rows are history only.
STARTED, SUCCEEDED, FAILED, SHADOW = "STARTED", "SUCCEEDED", "FAILED", "SHADOW"


@dataclass(frozen=True)
class AdviceOutcome:
    """What recording a decision did: created, updated (new generation), unchanged, not_needed or kept_vetoed."""

    change: str
    advice: Advice | None = None

    @property
    def changed(self) -> bool:
        return self.change in {CREATED, UPDATED}


def decision_of(advice: Advice) -> Decision:
    """The stored Advice as the domain's Decision, so later signals merge into it."""
    return Decision(
        operation=Operation(advice.operation),
        reason=advice.reason,
        rule=advice.rule or "",
        exclusions=tuple(advice.exclusions or ()),
        expires_at=advice.expires_at,
    )


def is_active(advice: Advice) -> bool:
    """Active = may still need reconciliation (the controller's and the watchdog's shared notion)."""
    return bool(advice.active) and advice.review != VETOED


async def announce(session: AsyncSession, *, advice: Advice, payload: dict[str, Any]) -> None:
    """Tell live readers an Advice changed (generation, operation, activity and disposition included)."""
    summary = {
        "generation": advice.generation,
        "operation": advice.operation,
        "active": advice.active,
        "disposition": advice.disposition,
    }
    await feed.announce(session, topic="advice", entity_id=advice.id, about=advice, payload={**summary, **payload})


def _refs(existing: dict[str, Any] | None, new: Iterable[str]) -> dict[str, Any]:
    refs = list((existing or {}).get("refs", []))
    for ref in new:
        if ref not in refs:
            refs.append(ref)
    return {**(existing or {}), "refs": refs}


async def record_decision(
    session: AsyncSession,
    *,
    attempt: Attempt,
    decision: Decision,
    mode: ModeDecision,
    signal: str,
    evidence_refs: Sequence[str] = (),
    partition_nodes: Iterable[str] | None = None,
    now: dt.datetime | None = None,
    checkpoint_check: dict[str, Any] | None = None,
    anomaly_id: int | None = None,
) -> AdviceOutcome:
    """Create the attempt's Advice or fold a later signal into it; the generation moves only when the decision does.

    `anomaly_id` is the anomaly this signal's decision rests on; it is kept with the generation it decided."""
    now = now or utcnow()
    existing = await queries.advice_for_attempt(session, attempt_id=attempt.id)
    if existing is not None and checkpoint_check is not None and existing.checkpoint_check != checkpoint_check:
        existing.checkpoint_check = checkpoint_check  # the newest look; a verdict, not a decision: same generation
    if existing is None:
        if decision.operation is Operation.NONE:
            created = await record_not_needed(session, attempt=attempt, decision=decision, signal=signal)
            return AdviceOutcome(NOT_NEEDED if created else UNCHANGED)
        values = advice_record(decision, mode=mode.mode, mode_reason=mode.reason, evidence_refs=evidence_refs)
        advice = Advice(
            attempt_id=attempt.id,
            job_id=attempt.job_id,
            cluster=attempt.cluster,
            slurm_job_id=attempt.slurm_job_id,
            attempt_index=attempt.attempt_index,
            generation=1,
            active=True,
            disposition=Disposition.PENDING.value,
            next_reconcile_at=now,
            reconcile_failures=0,
            created_at=now,
            updated_at=now,
            checkpoint_check=checkpoint_check,
            anomaly_id=anomaly_id,
            **values,
        )
        session.add(advice)
        await session.flush()
        await _audit_change(session, advice, "advice.created", signal=signal)
        await notify.advice_decided(session, advice=advice)
        await announce(session, advice=advice, payload={"change": CREATED})
        return AdviceOutcome(CREATED, advice)

    if existing.review == VETOED:
        return AdviceOutcome(KEPT_VETOED, existing)
    old = decision_of(existing)
    merged = merge_signals(old, decision, partition_nodes=partition_nodes)
    closed_observed = not existing.active and existing.disposition_reason == GateReason.DECIDED_IN_OBSERVE.value
    if merged is old or not advice_changed(old, merged) or closed_observed:
        if existing.anomaly_id is None and anomaly_id is not None:
            existing.anomaly_id = anomaly_id  # decided on a Slurm state first: the evidence that came after explains it
        if evidence_refs:
            refs = _refs(existing.evidence, evidence_refs)
            if refs != existing.evidence:
                existing.evidence = refs
        return AdviceOutcome(UNCHANGED, existing)
    if existing.mode != ACT:
        # A failure decided in observe mode stays so: a later signal about the same attempt is not a new decision
        # under a ceiling flipped since (only an operator's "decide again now" is, app.advice.redecide).
        mode = ModeDecision(existing.mode, existing.mode_reason or "decided in observe mode", mode.requested)
    values = advice_record(merged, mode=mode.mode, mode_reason=mode.reason, evidence_refs=())
    previous = {
        "operation": existing.operation,
        "exclusions": list(existing.exclusions or ()),
        "generation": existing.generation,
    }
    for name in ("operation", "exclusions", "reason", "rule", "expires_at", "mode", "mode_reason"):
        setattr(existing, name, values[name])
    existing.evidence = _refs(existing.evidence, evidence_refs)
    if anomaly_id is not None:
        existing.anomaly_id = anomaly_id
    existing.generation = existing.generation + 1
    existing.active = True
    existing.disposition = Disposition.PENDING.value
    existing.disposition_reason = None
    existing.disposition_message = None
    existing.next_reconcile_at = now
    existing.reconcile_failures = 0
    existing.updated_at = now
    await _audit_change(session, existing, "advice.updated", signal=signal, previous=previous)
    await notify.advice_decided(session, advice=existing)
    await announce(session, advice=existing, payload={"change": UPDATED})
    return AdviceOutcome(UPDATED, existing)


async def cite_root_cause(session: AsyncSession, *, advice: Advice, anomaly_id: int | None) -> None:
    """Move the cited anomaly to a crash's newer root cause, when the Advice cites a crash (or nothing) now."""
    if anomaly_id is None or advice.anomaly_id == anomaly_id:
        return
    current = await session.get(Anomaly, advice.anomaly_id) if advice.anomaly_id is not None else None
    if current is None or (current.kind == "CRASH" and current.attempt_id == advice.attempt_id):
        advice.anomaly_id = anomaly_id


async def _audit_change(
    session: AsyncSession, advice: Advice, event_type: str, *, signal: str, previous: dict[str, Any] | None = None
) -> None:
    verb = "created" if event_type == "advice.created" else f"updated to generation {advice.generation}"
    excluded = f" excluding {', '.join(advice.exclusions)}" if advice.exclusions else ""
    await audit.record(
        session,
        component="advisor",
        event_type=event_type,
        level="WARNING" if advice.operation == Operation.TERMINATE.value else "INFO",
        message=f"Advice {advice.id} {verb}: {advice.operation}{excluded} ({advice.mode}); {advice.reason}",
        payload={
            "adviceId": advice.id,
            "generation": advice.generation,
            "operation": advice.operation,
            "exclusions": list(advice.exclusions or ()),
            "rule": advice.rule,
            "reason": advice.reason,
            "mode": advice.mode,
            "modeReason": advice.mode_reason,
            "signal": signal,
            "expiresAt": advice.expires_at.isoformat() if advice.expires_at else None,
            **({"previous": previous} if previous else {}),
        },
        cluster=advice.cluster,
        slurm_job_id=advice.slurm_job_id,
        attempt_index=advice.attempt_index,
    )


async def record_not_needed(session: AsyncSession, *, attempt: Attempt, decision: Decision, signal: str) -> bool:
    """Write why no Advice was needed for this attempt, once per attempt; False when it was already written."""
    if await queries.not_needed_recorded(session, attempt=attempt):
        return False
    await audit.record(
        session,
        component="advisor",
        event_type="advice.not_needed",
        message=f"no Advice for attempt {attempt.slurm_job_id}/{attempt.attempt_index}: {decision.reason}",
        payload={"attemptId": attempt.id, "rule": decision.rule, "reason": decision.reason, "signal": signal},
        cluster=attempt.cluster,
        slurm_job_id=attempt.slurm_job_id,
        attempt_index=attempt.attempt_index,
    )
    return True


# ---------------------------------------------------------------- milestones (scheduler actions)


def as_milestones(actions: Sequence[SchedulerAction]) -> list[Milestone]:
    """The planner's view of stored actions: STARTED/SUCCEEDED rows of every actor (a watchdog release counts)."""
    out = []
    for action in actions:
        if action.status not in {STARTED, SUCCEEDED}:
            continue
        try:
            step = StepKind(action.step)
        except ValueError:
            continue
        out.append(
            Milestone(
                generation=action.generation,
                step=step,
                status=action.status,
                at=action.finished_at or action.started_at,
            )
        )
    return out


async def begin_action(
    session: AsyncSession,
    *,
    advice: Advice,
    step: StepKind,
    key: str,
    command: str,
    actor: str = "controller",
    gate: str | None = None,
    now: dt.datetime | None = None,
) -> SchedulerAction:
    """Write the STARTED intent before a command is sent (a retry of the same key reuses its row)."""
    now = now or utcnow()
    action = await session.scalar(select(SchedulerAction).where(SchedulerAction.idempotency_key == key))
    if action is None:
        action = SchedulerAction(
            advice_id=advice.id, generation=advice.generation, step=step.value, idempotency_key=key, actor=actor
        )
        session.add(action)
    elif action.status == SUCCEEDED:
        raise ValueError(f"action {key} already succeeded; it is never sent twice")
    action.status, action.command, action.started_at, action.finished_at, action.duration_ms = (
        STARTED,
        command,
        now,
        None,
        None,
    )
    action.gate = gate
    await session.flush()
    return action


async def finish_action(
    session: AsyncSession,
    *,
    action: SchedulerAction,
    advice: Advice,
    succeeded: bool,
    duration_ms: float,
    detail: str,
    component: str = "controller",
    event_type: str | None = None,
    now: dt.datetime | None = None,
) -> None:
    """Record the command's outcome with its duration, as a milestone update and an audit event."""
    now = now or utcnow()
    action.status = SUCCEEDED if succeeded else FAILED
    action.finished_at = now
    action.duration_ms = round(duration_ms, 3)
    action.detail = detail[:4000]
    await audit.record(
        session,
        component=component,
        event_type=event_type or f"scheduler.{action.step}",
        level="INFO" if succeeded else "WARNING",
        message=f"{action.command} {'succeeded' if succeeded else 'failed'} in {duration_ms:.0f} ms "
        f"(Advice {advice.id} generation {action.generation}): {detail}",
        payload={
            "adviceId": advice.id,
            "generation": action.generation,
            "step": action.step,
            "status": action.status,
            "idempotencyKey": action.idempotency_key,
            "command": action.command,
            "durationMs": action.duration_ms,
            "detail": detail[:1000],
        },
        cluster=advice.cluster,
        slurm_job_id=advice.slurm_job_id,
        attempt_index=advice.attempt_index,
    )
    if succeeded and component == "watchdog" and action.step == StepKind.RELEASE.value:
        await notify.watchdog_released(session, advice=advice, action_id=action.id, detail=detail)


async def confirm_action(
    session: AsyncSession, *, action: SchedulerAction, evidence: str, now: dt.datetime | None = None
) -> None:
    """An intent left STARTED by an interrupted controller whose effect a fresh observation shows: mark it SUCCEEDED."""
    action.status = SUCCEEDED
    action.finished_at = now or utcnow()
    action.detail = f"the process stopped before recording the result; {evidence}"[:4000]
    advice = await session.get(Advice, action.advice_id)
    await audit.record(
        session,
        component="controller",
        event_type="scheduler.confirmed",
        message=f"{action.step} of Advice {action.advice_id} generation {action.generation} had taken "
        f"effect before an interruption: {evidence}",
        payload={
            "adviceId": action.advice_id,
            "generation": action.generation,
            "step": action.step,
            "idempotencyKey": action.idempotency_key,
        },
        # Scoped to the job and attempt so that the job's audit trail shows the confirmation.
        cluster=advice.cluster if advice else None,
        slurm_job_id=advice.slurm_job_id if advice else None,
        attempt_index=advice.attempt_index if advice else None,
    )
    # The command itself took effect: it gets its own event (e.g. `scheduler.requeue_hold`) like any sent command,
    # so the history shows the hold even when the process (or the database) went away before recording it.
    await audit.record(
        session,
        component="controller",
        event_type=f"scheduler.{action.step}",
        message=f"{action.command or action.step} took effect (confirmed from Slurm after an interruption): {evidence}",
        payload={
            "adviceId": action.advice_id,
            "generation": action.generation,
            "step": action.step,
            "idempotencyKey": action.idempotency_key,
            "confirmed": True,
        },
        cluster=advice.cluster if advice else None,
        slurm_job_id=advice.slurm_job_id if advice else None,
        attempt_index=advice.attempt_index if advice else None,
    )


def shadow_key(advice: Advice, step: StepKind) -> str:
    """Idempotency key of a shadow action: once per Advice generation and step."""
    return f"shadow:{advice.id}:{advice.generation}:{step.value}"


async def record_shadow(
    session: AsyncSession,
    *,
    advice: Advice,
    steps: Sequence[Step],
    now: dt.datetime | None = None,
    target: int | str | None = None,
    gate: str | None = None,
) -> int:
    """Record the commands observe mode would have sent (SHADOW rows, once per generation); returns rows added."""
    now = now or utcnow()
    keys = [shadow_key(advice, step.kind) for step in steps if step.is_action]
    if not keys:
        return 0
    existing = set(
        (
            await session.scalars(
                select(SchedulerAction.idempotency_key).where(SchedulerAction.idempotency_key.in_(keys))
            )
        ).all()
    )
    added = []
    for step in steps:
        if not step.is_action or shadow_key(advice, step.kind) in existing:
            continue
        session.add(
            SchedulerAction(
                advice_id=advice.id,
                generation=advice.generation,
                step=step.kind.value,
                idempotency_key=shadow_key(advice, step.kind),
                status=SHADOW,
                actor="controller",
                command=command_text(step, target or advice.slurm_job_id),
                detail=step.message,
                gate=gate,
                started_at=now,
                finished_at=now,
                duration_ms=0.0,
            )
        )
        added.append(step)
    if added:
        await session.flush()
        await audit.record(
            session,
            component="controller",
            event_type="reconciliation.shadow",
            message=f"observe mode: Advice {advice.id} generation {advice.generation} would run "
            + ", then ".join(command_text(s, target or advice.slurm_job_id) for s in added),
            payload={
                "adviceId": advice.id,
                "generation": advice.generation,
                "steps": [s.kind.value for s in added],
                "messages": [s.message for s in added],
            },
            cluster=advice.cluster,
            slurm_job_id=advice.slurm_job_id,
            attempt_index=advice.attempt_index,
        )
    return len(added)


def command_text(step: Step, job_id: int | str) -> str:
    """The Slurm command line a step stands for (shown in milestones and audit events); job_id may be `151_4`."""
    if step.kind is StepKind.REQUEUE_HOLD:
        return f"scontrol requeuehold {job_id}"
    if step.kind is StepKind.SET_EXCLUSIONS:
        return f"scontrol update JobId={job_id} ExcNodeList={','.join(step.exclusions)}"
    if step.kind is StepKind.RELEASE:
        return f"scontrol release {job_id}"
    if step.kind is StepKind.CANCEL:
        return f"scancel {job_id}"
    return step.kind.value


# ---------------------------------------------------------------- reconciliation status


async def cite_stacks(session: AsyncSession, *, advice: Advice, sentence: str, ref: str | None) -> None:
    """The Advice's reason names what the stacks captured before acting showed (same generation: a citation, not a
    decision; a blamed node reaches the exclusions through the advisor)."""
    text = f"Stacks before acting: {sentence}"
    if text not in (advice.reason or ""):
        advice.reason = f"{advice.reason} {text}".strip() if advice.reason else text
    if ref:
        advice.evidence = _refs(advice.evidence, [ref])
    await announce(session, advice=advice, payload={"change": "stacks"})


async def keep_pending(
    session: AsyncSession, *, advice: Advice, reason: str | None, message: str, now: dt.datetime
) -> bool:
    """Leave the Advice active and PENDING for this reason, looked at again after OBSERVE_RECHECK seconds."""
    return await set_status(
        session,
        advice=advice,
        disposition=Disposition.PENDING,
        reason=reason,
        message=message,
        next_reconcile_at=now + dt.timedelta(seconds=OBSERVE_RECHECK),
        now=now,
    )


async def set_status(
    session: AsyncSession,
    *,
    advice: Advice,
    disposition: Disposition,
    reason: str | None,
    message: str,
    next_reconcile_at: dt.datetime | None,
    observed: bool = True,
    now: dt.datetime | None = None,
) -> bool:
    """Store the controller's reconciliation status (CONVERGED/ABANDONED end the Advice); True when it changed.

    An Advice decided in observe mode says so in every status, forever: "decided in observe mode; not carried out".
    """
    now = now or utcnow()
    if advice.mode != ACT and not message.startswith(DECIDED_IN_OBSERVE_TEXT):
        message = f"{DECIDED_IN_OBSERVE_TEXT}; {message}"
    terminal = disposition is not Disposition.PENDING
    changed = (advice.disposition, advice.disposition_reason, advice.disposition_message) != (
        disposition.value,
        reason,
        message,
    )
    advice.disposition, advice.disposition_reason, advice.disposition_message = (
        disposition.value,
        reason,
        message[:4000],
    )
    if observed:
        advice.observed_generation = advice.generation
    advice.next_reconcile_at = None if terminal else next_reconcile_at
    if terminal:
        advice.active = False
        advice.reconcile_failures = 0
    if changed:
        advice.updated_at = now
        if terminal:
            metrics.RECONCILIATIONS.labels(disposition.value, reason or "none").inc()
            seconds = (now - advice.created_at).total_seconds() if advice.created_at else None
            await audit.record(
                session,
                component="controller",
                event_type="reconciliation.converged"
                if disposition is Disposition.CONVERGED
                else "reconciliation.abandoned",
                level="INFO" if disposition is Disposition.CONVERGED else "WARNING",
                message=f"Advice {advice.id} generation {advice.generation} {disposition.value} ({reason}): {message}",
                payload={
                    "adviceId": advice.id,
                    "generation": advice.generation,
                    "disposition": disposition.value,
                    "reason": reason,
                    "message": message,
                    "secondsSinceCreated": round(seconds, 3) if seconds is not None else None,
                },
                cluster=advice.cluster,
                slurm_job_id=advice.slurm_job_id,
                attempt_index=advice.attempt_index,
            )
            if disposition is Disposition.ABANDONED:
                await notify.advice_abandoned(session, advice=advice, reason=reason, message=message)
        await announce(session, advice=advice, payload={"change": "reconciliation", "reason": reason})
    return changed


async def record_reconcile_failure(
    session: AsyncSession, *, advice: Advice, error: str, retry_at: dt.datetime, now: dt.datetime | None = None
) -> None:
    """A transient Slurm failure: keep the Advice, count the failure and look again at `retry_at`."""
    now = now or utcnow()
    advice.reconcile_failures = (advice.reconcile_failures or 0) + 1
    advice.next_reconcile_at = retry_at
    advice.disposition_message = (
        f"Slurm did not answer ({advice.reconcile_failures} in a row); "
        f"retrying at {retry_at.isoformat(timespec='seconds')}: {error}"[:4000]
    )
    advice.updated_at = now


async def record_would_release(
    session: AsyncSession,
    *,
    advice: Advice,
    key: str,
    reason: str,
    message: str,
    now: dt.datetime | None = None,
    target: int | str | None = None,
    gate: str | None = None,
) -> bool:
    """The watchdog in observe mode: say once per hold (a SHADOW row keyed `key`) what act mode would release."""
    if await queries.action_recorded(session, key=key):
        return False
    now = now or utcnow()
    session.add(
        SchedulerAction(
            advice_id=advice.id,
            generation=advice.generation,
            step=StepKind.RELEASE.value,
            idempotency_key=key,
            status=SHADOW,
            actor="watchdog",
            command=f"scontrol release {target or advice.slurm_job_id}",
            detail=message,
            gate=gate,
            started_at=now,
            finished_at=now,
            duration_ms=0.0,
        )
    )
    await audit.record(
        session,
        component="watchdog",
        event_type="watchdog.would_release",
        level="WARNING",
        message=f"watchdog (observe) would release job {advice.slurm_job_id}: {message}",
        payload={"adviceId": advice.id, "generation": advice.generation, "reason": reason, "mode": "observe"},
        cluster=advice.cluster,
        slurm_job_id=advice.slurm_job_id,
        attempt_index=advice.attempt_index,
    )
    return True


async def record_sent(session: AsyncSession, *, advice: Advice, command: str, now: dt.datetime) -> None:
    """A command was sent for this Advice: look at it again at once (a fresh observation proves its effect)."""
    advice.disposition_message = f"sent: {command}"
    advice.next_reconcile_at = now
    advice.reconcile_failures = 0
    advice.updated_at = now


async def record_twin(
    session: AsyncSession, *, advice: Advice, twin_job_id: int, twin_name: str, dependency: str | None
) -> None:
    """The held twin job a singleton workflow submitted is the retry of this Advice's job (with an audit event)."""
    advice.successor_job_id = twin_job_id
    await audit.record(
        session,
        component="controller",
        event_type="singleton.twin_found",
        message=f"Advice {advice.id}: held twin job {twin_job_id} (name {twin_name!r}, "
        f"dependency {dependency}) will be the retry of job {advice.slurm_job_id}",
        payload={"adviceId": advice.id, "twinJobId": twin_job_id, "dependency": dependency},
        cluster=advice.cluster,
        slurm_job_id=advice.slurm_job_id,
        attempt_index=advice.attempt_index,
    )


# ---- operator review (the rules of each action: app/advice/review.py) ----------------------------


async def record_approval(session: AsyncSession, *, advice: Advice, user: str) -> None:
    """Keep the operator's approval of an active Advice."""
    advice.review, advice.reviewed_by, advice.updated_at = APPROVED, user, utcnow()


async def record_veto(session: AsyncSession, *, advice: Advice, user: str, reason: str) -> None:
    """Stop an Advice for good: inactive, ABANDONED with reason VETOED, the operator's reason kept."""
    advice.review, advice.reviewed_by = VETOED, user
    advice.active = False
    advice.disposition = Disposition.ABANDONED.value
    advice.disposition_reason = VETOED
    advice.disposition_message = f"vetoed by {user}: {reason}"
    advice.next_reconcile_at = None
    advice.updated_at = utcnow()


async def request_reconcile(session: AsyncSession, *, advice: Advice, user: str, reactivate: bool) -> None:
    """Have the controller reconcile the Advice at once; `reactivate`: an abandoned one becomes active PENDING again."""
    if reactivate:
        previous = advice.disposition_reason
        advice.active = True
        advice.disposition = Disposition.PENDING.value
        advice.disposition_reason = None
        advice.disposition_message = f"reconciliation re-run by {user} (was ABANDONED {previous})"
    advice.next_reconcile_at = utcnow()
    advice.reconcile_failures = 0
    advice.updated_at = utcnow()


async def record_decided_again(
    session: AsyncSession, *, old: Advice, user: str, mode_reason: str, now: dt.datetime
) -> Advice:
    """A new Advice (next round, act mode) repeating an observe-mode one's decision; the old one points to it."""
    ttl = old.expires_at - old.created_at if old.expires_at is not None else None
    new = Advice(
        attempt_id=old.attempt_id,
        job_id=old.job_id,
        cluster=old.cluster,
        slurm_job_id=old.slurm_job_id,
        attempt_index=old.attempt_index,
        decision_round=old.decision_round + 1,
        supersedes_id=old.id,
        operation=old.operation,
        exclusions=list(old.exclusions or ()),
        reason=old.reason,
        rule=old.rule,
        evidence=dict(old.evidence or {}),
        generation=1,
        mode=ACT,
        mode_reason=f"decided again now by {user} (Advice {old.id} was decided in observe mode): {mode_reason}",
        expires_at=now + ttl if ttl is not None else None,
        active=True,
        disposition=Disposition.PENDING.value,
        next_reconcile_at=now,
        reconcile_failures=0,
        created_at=now,
        updated_at=now,
        checkpoint_check=old.checkpoint_check,
        successor_job_id=old.successor_job_id,
    )
    session.add(new)
    await session.flush()
    old.superseded_by_id = new.id
    return new
