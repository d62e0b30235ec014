"""Operator review of Advice (approve, veto, re-run reconciliation, decide again now): each is an audit event
naming the user."""

from __future__ import annotations

from typing import Any

from sqlalchemy import exists, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.advice import service as advice_service
from app.advice.models import Advice
from app.audit import service as audit
from app.domain.admission.mode import ModeSettings, effective_mode
from app.domain.control.planner import Disposition, DispositionReason
from app.domain.decision.gate import DECIDED_IN_OBSERVE_TEXT, GateReason, decide_again_refusal
from app.infra.db import dialect_of, utcnow
from app.jobs.models import Attempt, Job
from app.notify import service as notify

VETOED = advice_service.VETOED
APPROVED = advice_service.APPROVED
MAX_REASON = 1000
# Abandonments that a later look at Slurm may undo: the job was not visible (a purged or restarted
# controller) or acting was not authorized (the operator may since have acknowledged actions).
# Expired, superseded or Slurm-exhausted Advice stays abandoned; a veto is never undone by a re-run.
TRANSIENT_ABANDON_REASONS = frozenset({DispositionReason.JOB_NOT_FOUND.value, DispositionReason.NOT_AUTHORIZED.value})


class ReviewError(ValueError):
    """The Advice does not exist or cannot take this review action."""

    def __init__(self, message: str, *, not_found: bool = False) -> None:
        super().__init__(message)
        self.not_found = not_found


async def _load(session: AsyncSession, advice_id: int) -> Advice:
    advice = await session.get(Advice, advice_id, with_for_update=dialect_of(session) == "postgresql")
    if advice is None:
        raise ReviewError(f"no Advice with id {advice_id}", not_found=True)
    return advice


async def _announce(
    session: AsyncSession, advice: Advice, *, event_type: str, message: str, user: str, payload: dict[str, Any]
) -> None:
    await audit.record(
        session,
        component="api",
        event_type=event_type,
        message=message,
        payload={"adviceId": advice.id, "generation": advice.generation, "user": user, **payload},
        cluster=advice.cluster,
        slurm_job_id=advice.slurm_job_id,
        attempt_index=advice.attempt_index,
        actor=user,
    )
    await advice_service.announce(session, advice=advice, payload={"review": advice.review, "by": user})


async def approve_advice(session: AsyncSession, *, advice_id: int, user: str) -> Advice:
    """Record the operator's approval of an active Advice."""
    advice = await _load(session, advice_id)
    if advice.review == VETOED:
        raise ReviewError(f"Advice {advice_id} was vetoed by {advice.reviewed_by}; it cannot be approved")
    if not advice.active:
        raise ReviewError(
            f"Advice {advice_id} is no longer active ({advice.disposition} "
            f"{advice.disposition_reason or ''}); nothing to approve".rstrip()
        )
    await advice_service.record_approval(session, advice=advice, user=user)
    await _announce(
        session,
        advice,
        event_type="advice.approved",
        message=f"{user} approved Advice {advice.id} ({advice.operation} {advice.slurm_job_id}/{advice.attempt_index})",
        user=user,
        payload={},
    )
    return advice


async def veto_advice(session: AsyncSession, *, advice_id: int, user: str, reason: str) -> Advice:
    """Stop an Advice for good: inactive, ABANDONED with reason VETOED, the operator's reason kept."""
    reason = reason.strip()[:MAX_REASON]
    if not reason:
        raise ReviewError("a veto needs a reason")
    advice = await _load(session, advice_id)
    if advice.review == VETOED:
        raise ReviewError(f"Advice {advice_id} was already vetoed by {advice.reviewed_by}")
    await advice_service.record_veto(session, advice=advice, user=user, reason=reason)
    await _announce(
        session,
        advice,
        event_type="advice.vetoed",
        message=f"{user} vetoed Advice {advice.id}: {reason}",
        user=user,
        payload={"reason": reason},
    )
    return advice


async def rerun_reconciliation(session: AsyncSession, *, advice_id: int, user: str) -> Advice:
    """Ask the controller to reconcile now; Advice abandoned for a transient reason becomes active PENDING again."""
    advice = await _load(session, advice_id)
    if advice.review == VETOED:
        raise ReviewError(f"Advice {advice_id} was vetoed by {advice.reviewed_by}; re-running it is refused")
    reactivated = False
    if not advice.active:
        if advice.disposition == Disposition.ABANDONED.value and advice.disposition_reason in TRANSIENT_ABANDON_REASONS:
            reactivated = True
        else:
            raise ReviewError(
                f"Advice {advice_id} is {advice.disposition} "
                f"({advice.disposition_reason or 'no reason'}), which a re-run cannot change; "
                f"only Advice abandoned for {', '.join(sorted(TRANSIENT_ABANDON_REASONS))} can be reactivated"
            )
    await advice_service.request_reconcile(session, advice=advice, user=user, reactivate=reactivated)
    await _announce(
        session,
        advice,
        event_type="advice.reconcile_requested",
        message=f"{user} asked to re-run reconciliation of Advice {advice.id}"
        + (" (reactivated)" if reactivated else ""),
        user=user,
        payload={"reactivated": reactivated},
    )
    return advice


async def decide_again(session: AsyncSession, *, advice_id: int, user: str, settings: ModeSettings) -> Advice:
    """ "Decide again now": a NEW Advice for a recent observe-mode failure, decided now under the mode now (act).

    The old Advice is never carried out and says so for good (ABANDONED / DECIDED_IN_OBSERVE, superseded by the
    new one); the new one repeats its decision (operation, exclusions, reason) as round 2 of the attempt, and the
    controller acts on it only after a fresh look at Slurm, like any Advice. The rule for "recent" is
    app.domain.decision.gate.decide_again_refusal.
    """
    old = await _load(session, advice_id)
    job = await session.get(Job, old.job_id)
    if job is None:
        raise ReviewError(f"the job of Advice {advice_id} is gone; nothing to decide again")
    now = utcnow()
    later = await session.scalar(
        select(exists().where(Attempt.job_id == old.job_id, Attempt.attempt_index > old.attempt_index))
    )
    mode = effective_mode(job, settings)
    refusal = decide_again_refusal(
        decided_mode=old.mode,
        vetoed=old.review == VETOED,
        superseded=old.superseded_by_id is not None,
        mode_now=mode,
        newest_attempt=not later,
        decided_at=old.created_at,
        expires_at=old.expires_at,
        now=now,
    )
    if refusal is not None:
        raise ReviewError(f"Advice {advice_id} cannot be decided again: {refusal}")
    new = await advice_service.record_decided_again(session, old=old, user=user, mode_reason=mode.reason, now=now)
    await advice_service.set_status(
        session,
        advice=old,
        disposition=Disposition.ABANDONED,
        reason=GateReason.DECIDED_IN_OBSERVE.value,
        message=f"{DECIDED_IN_OBSERVE_TEXT}; decided again now by {user} as Advice {new.id}",
        next_reconcile_at=None,
        now=now,
    )
    await _announce(
        session,
        old,
        event_type="advice.decided_again",
        message=f"{user} decided Advice {old.id} again now: new Advice {new.id} ({new.operation} "
        f"{new.slurm_job_id}/{new.attempt_index}, act); Advice {old.id} was decided in observe mode and is not "
        "carried out",
        user=user,
        payload={"newAdviceId": new.id, "modeNow": mode.mode, "modeReason": mode.reason},
    )
    await notify.advice_decided(session, advice=new)
    await advice_service.announce(session, advice=new, payload={"change": advice_service.CREATED, "by": user})
    return new
