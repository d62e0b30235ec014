"""The one gate every scheduler command passes before it is sent: may it go now, and if not, why (pure).

Every sender asks `may_send` right before a command (the controller's requeue path and cancel, the
singleton twin path, the watchdog's release, the drainer) and records the answer with the action.
What the gate reads for each kind of action:

| action | ceiling | job's mode now | decided in act, not vetoed | own switch | fleet |
| --- | --- | --- | --- | --- | --- |
| requeue path, cancel, twin release | yes | yes | yes | — | budgets, storm pause |
| watchdog release (of our own hold) | no | — | — | `RECOVERY_WATCHDOG_MODE` | — |
| node drain | yes | (the node's partition) | — | `RECOVERY_NODE_DRAIN` | the drain fraction |

The ceiling (`RECOVERY_ACKNOWLEDGE_SCHEDULER_ACTIONS`) therefore covers every command Recovery starts on its
own. It does not cover the watchdog releasing a hold our own requeue placed: that undoes an action of ours and
is the fail-open path, which must keep working during a rollback with the ceiling off (docs/operator-guide.md).
An Advice decided in observe mode is never carried out, whatever the mode is now: a ceiling turned on
later acts on failures decided after it, not on old ones (an operator may decide a recent one again).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from enum import StrEnum

from app.domain.admission.mode import ACT, CEILING_SETTING, PARTITIONS_SETTING, ModeDecision, resolve_mode


class ActionKind(StrEnum):
    """What a command is for, which decides the inputs the gate reads."""

    REQUEUE = "requeue"  # the controller's RESTART: requeue-hold, exclusions, release
    CANCEL = "cancel"  # the controller's TERMINATE
    TWIN_RELEASE = "twin_release"  # singleton_dependency RESTART: cancel the first job, exclude and release its twin
    WATCHDOG_RELEASE = "watchdog_release"  # the watchdog releasing a hold our requeue placed
    DRAIN = "drain"  # the drainer draining a suspect node


ADVICE_KINDS = frozenset({ActionKind.REQUEUE, ActionKind.CANCEL, ActionKind.TWIN_RELEASE})
SWITCH_SETTINGS: dict[ActionKind, str] = {
    ActionKind.WATCHDOG_RELEASE: "RECOVERY_WATCHDOG_MODE",
    ActionKind.DRAIN: "RECOVERY_NODE_DRAIN",
}


class GateReason(StrEnum):
    """Why a command may (ALLOWED) or may not be sent now."""

    ALLOWED = "ALLOWED"
    CEILING_OFF = "CEILING_OFF"
    PARTITION_UNMANAGED = "PARTITION_UNMANAGED"
    OBSERVE_REQUESTED = "OBSERVE_REQUESTED"
    JOB_GONE = "JOB_GONE"
    DECIDED_IN_OBSERVE = "DECIDED_IN_OBSERVE"
    VETOED = "VETOED"
    SWITCH_OFF = "SWITCH_OFF"
    SWITCH_OBSERVE = "SWITCH_OBSERVE"
    FLEET_HELD = "FLEET_HELD"


DECIDED_IN_OBSERVE_TEXT = "decided in observe mode; not carried out"


@dataclass(frozen=True)
class GateQuestion:
    """Everything the gate reads about one command (what does not apply to its kind is ignored)."""

    kind: ActionKind
    ceiling: bool  # the operator's acknowledgment ceiling now
    partition_managed: bool = True  # the job's partition (the node's, for a drain) is in the allowlist
    job_known: bool = True  # the job's record exists (Advice kinds)
    requested_mode: str | None = None  # the mode the job's policy requested (Advice kinds)
    decided_mode: str | None = None  # the mode the Advice was decided under (Advice kinds)
    vetoed: bool = False
    switch: str | None = None  # the component's own switch: act | observe | off (watchdog, drain)
    fleet_hold: str | None = None  # why the fleet rules hold it (budget, storm, drain fraction), else None


@dataclass(frozen=True)
class GateAnswer:
    """The gate's answer: allowed or not, a reason code and a sentence."""

    allowed: bool
    reason: GateReason
    message: str

    @property
    def record(self) -> str:
        """The text stored with the action (its `gate` column)."""
        return f"{'allowed' if self.allowed else 'not sent'} ({self.reason.value}): {self.message}"


def _no(reason: GateReason, message: str) -> GateAnswer:
    return GateAnswer(False, reason, message)


def may_send(q: GateQuestion) -> GateAnswer:
    """May this command be sent now? The first input that forbids it is the reason (see the module's table)."""
    if q.kind in ADVICE_KINDS:
        return _advice_gate(q)
    if not q.ceiling and q.kind is not ActionKind.WATCHDOG_RELEASE:  # undoing our own hold is the fail-open path
        return _no(GateReason.CEILING_OFF, f"the operator's acknowledgment ceiling ({CEILING_SETTING}) is off")
    setting = SWITCH_SETTINGS[q.kind]
    if q.switch != ACT:
        if q.switch == "observe":
            return _no(GateReason.SWITCH_OBSERVE, f"{setting}=observe: recorded, not sent")
        return _no(GateReason.SWITCH_OFF, f"{setting} is {q.switch or 'off'}")
    if q.kind is ActionKind.DRAIN:
        if not q.partition_managed:
            return _no(GateReason.PARTITION_UNMANAGED, f"the node's partition is not managed ({PARTITIONS_SETTING})")
        if q.fleet_hold is not None:
            return _no(GateReason.FLEET_HELD, q.fleet_hold)
    ceiling = "ceiling on" if q.ceiling else "ceiling off (it does not cover releasing our own hold)"
    return GateAnswer(True, GateReason.ALLOWED, f"{ceiling} and {setting}=act")


def _advice_gate(q: GateQuestion) -> GateAnswer:
    """Requeue path, cancel and twin release: veto, the job's mode now, the mode it was decided under, the fleet."""
    if q.vetoed:
        return _no(GateReason.VETOED, "vetoed by an operator")
    if not q.job_known:
        return _no(GateReason.JOB_GONE, "the job's record is gone")
    now = resolve_mode(requested=q.requested_mode, acknowledged=q.ceiling, partition_managed=q.partition_managed)
    observed = q.decided_mode != ACT
    if now.mode != ACT:
        if not q.ceiling:
            reason = GateReason.CEILING_OFF
        elif not q.partition_managed and q.requested_mode == ACT:
            reason = GateReason.PARTITION_UNMANAGED
        else:
            reason = GateReason.OBSERVE_REQUESTED
        text = f"mode {now.mode} now: {now.reason}"
        return _no(reason, f"{DECIDED_IN_OBSERVE_TEXT} ({text})" if observed else text)
    if observed:
        return _no(
            GateReason.DECIDED_IN_OBSERVE,
            f"{DECIDED_IN_OBSERVE_TEXT}: the job's mode is act now, but a decision taken in observe mode is never "
            "carried out later (an operator may decide a recent failure again now)",
        )
    if q.fleet_hold is not None:
        return _no(GateReason.FLEET_HELD, q.fleet_hold)
    return GateAnswer(
        True, GateReason.ALLOWED, "ceiling on, the job's mode is act now and the Advice was decided in act mode"
    )


# "Decide again now": how long after an observe-mode decision an operator may re-decide it under the mode now.
DECIDE_AGAIN_WINDOW = dt.timedelta(hours=1)


def decide_again_refusal(
    *,
    decided_mode: str,
    vetoed: bool,
    superseded: bool,
    mode_now: ModeDecision,
    newest_attempt: bool,
    decided_at: dt.datetime,
    expires_at: dt.datetime | None,
    now: dt.datetime,
) -> str | None:
    """Why an observe-mode Advice may not be decided again now, or None when it may.

    Recent means the attempt is still recoverable: it is still the job's newest attempt (Slurm started
    no later one), the Advice has not expired and it was decided at most DECIDE_AGAIN_WINDOW ago.
    """
    if decided_mode == ACT:
        return "it was decided in act mode; only a decision taken in observe mode is decided again"
    if vetoed:
        return "it was vetoed"
    if superseded:
        return "it was already decided again"
    if mode_now.mode != ACT:
        return f"the job's mode is {mode_now.mode} now ({mode_now.reason}); deciding again would decide in observe mode"
    if not newest_attempt:
        return "a later attempt of the job exists; the failure is no longer recoverable"
    if expires_at is not None and expires_at <= now:
        return f"it expired at {expires_at.isoformat(timespec='seconds')}"
    if now - decided_at > DECIDE_AGAIN_WINDOW:
        return (
            f"it was decided at {decided_at.isoformat(timespec='seconds')}, more than "
            f"{int(DECIDE_AGAIN_WINDOW.total_seconds() // 60)} minutes ago; only a recent failure is decided again"
        )
    return None
