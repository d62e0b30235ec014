"""The one gate every scheduler command passes (app.domain.decision.gate): every input combination that matters."""

import datetime as dt
import itertools

import pytest

from app.domain.admission.mode import ModeDecision
from app.domain.decision.gate import (
    DECIDE_AGAIN_WINDOW,
    DECIDED_IN_OBSERVE_TEXT,
    ActionKind,
    GateQuestion,
    GateReason,
    decide_again_refusal,
    may_send,
)

ADVICE_KINDS = (ActionKind.REQUEUE, ActionKind.CANCEL, ActionKind.TWIN_RELEASE)


@pytest.mark.parametrize("kind", ADVICE_KINDS)
@pytest.mark.parametrize(
    ("ceiling", "requested", "managed", "decided", "vetoed", "known", "fleet"),
    list(
        itertools.product(
            (True, False),
            ("act", "observe", None),
            (True, False),
            ("act", "observe"),
            (False, True),
            (True, False),
            (None, "storm"),
        )
    ),
)
def test_an_advice_command_goes_only_when_every_input_allows_it(
    kind, ceiling, requested, managed, decided, vetoed, known, fleet
) -> None:
    answer = may_send(
        GateQuestion(
            kind=kind,
            ceiling=ceiling,
            requested_mode=requested,
            partition_managed=managed,
            decided_mode=decided,
            vetoed=vetoed,
            job_known=known,
            fleet_hold=fleet,
        )
    )
    allowed = ceiling and requested == "act" and managed and decided == "act" and not vetoed and known and not fleet
    assert answer.allowed is allowed
    assert answer.record.startswith("allowed (ALLOWED)" if allowed else "not sent (")
    if vetoed:
        assert answer.reason is GateReason.VETOED
    elif not known:
        assert answer.reason is GateReason.JOB_GONE
    elif not ceiling:
        assert answer.reason is GateReason.CEILING_OFF
    elif requested == "act" and not managed:
        assert answer.reason is GateReason.PARTITION_UNMANAGED
    elif requested != "act":
        assert answer.reason is GateReason.OBSERVE_REQUESTED
    elif decided != "act":
        assert answer.reason is GateReason.DECIDED_IN_OBSERVE
    elif fleet:
        assert answer.reason is GateReason.FLEET_HELD and answer.message == "storm"
    # an Advice decided in observe mode says so in every answer that does not let it go
    if decided == "observe" and not vetoed and known:
        assert answer.message.startswith(DECIDED_IN_OBSERVE_TEXT)


def test_the_ceiling_turned_on_later_does_not_carry_out_an_observe_mode_decision() -> None:
    before = may_send(GateQuestion(ActionKind.REQUEUE, ceiling=False, requested_mode="act", decided_mode="observe"))
    after = may_send(GateQuestion(ActionKind.REQUEUE, ceiling=True, requested_mode="act", decided_mode="observe"))
    fresh = may_send(GateQuestion(ActionKind.REQUEUE, ceiling=True, requested_mode="act", decided_mode="act"))
    assert (before.reason, after.reason, fresh.reason) == (
        GateReason.CEILING_OFF,
        GateReason.DECIDED_IN_OBSERVE,
        GateReason.ALLOWED,
    )
    assert not before.allowed and not after.allowed and fresh.allowed


@pytest.mark.parametrize(
    ("ceiling", "switch", "fleet", "expected"),
    [
        (True, "act", None, GateReason.ALLOWED),
        (True, "act", "budget spent", GateReason.ALLOWED),  # a storm never keeps our own hold in place
        (False, "act", None, GateReason.ALLOWED),  # fail-open: a rollback with the ceiling off still releases
        (True, "observe", None, GateReason.SWITCH_OBSERVE),
        (False, "observe", None, GateReason.SWITCH_OBSERVE),
        (True, "off", None, GateReason.SWITCH_OFF),
        (True, None, None, GateReason.SWITCH_OFF),
    ],
)
def test_the_watchdog_release_reads_its_own_switch_only(ceiling, switch, fleet, expected) -> None:
    # the ceiling, the job's mode, the mode at decision and a veto do not matter: the hold is ours to undo
    answer = may_send(
        GateQuestion(
            ActionKind.WATCHDOG_RELEASE,
            ceiling=ceiling,
            switch=switch,
            fleet_hold=fleet,
            requested_mode="observe",
            decided_mode="observe",
            vetoed=True,
        )
    )
    assert answer.reason is expected and answer.allowed is (expected is GateReason.ALLOWED)
    if expected is GateReason.SWITCH_OBSERVE:
        assert "RECOVERY_WATCHDOG_MODE=observe" in answer.message


@pytest.mark.parametrize(
    ("ceiling", "switch", "managed", "fleet", "expected"),
    [
        (True, "act", True, None, GateReason.ALLOWED),
        (False, "act", True, None, GateReason.CEILING_OFF),
        (True, "observe", True, None, GateReason.SWITCH_OBSERVE),
        (True, "off", True, None, GateReason.SWITCH_OFF),
        (True, "act", False, None, GateReason.PARTITION_UNMANAGED),
        (True, "act", True, "would make 2 of 3 drained", GateReason.FLEET_HELD),
        (False, "observe", False, "fraction", GateReason.CEILING_OFF),
    ],
)
def test_a_drain_reads_the_ceiling_its_switch_the_partition_and_the_drain_fraction(
    ceiling, switch, managed, fleet, expected
) -> None:
    answer = may_send(
        GateQuestion(ActionKind.DRAIN, ceiling=ceiling, switch=switch, partition_managed=managed, fleet_hold=fleet)
    )
    assert answer.reason is expected and answer.allowed is (expected is GateReason.ALLOWED)
    if expected is GateReason.CEILING_OFF:
        assert "RECOVERY_ACKNOWLEDGE_SCHEDULER_ACTIONS" in answer.message


NOW = dt.datetime(2026, 12, 5, 10, 0, tzinfo=dt.UTC)
ACT_NOW = ModeDecision("act", "mode act requested, ceiling on", "act")


def refusal(**changes) -> str | None:
    values = {
        "decided_mode": "observe",
        "vetoed": False,
        "superseded": False,
        "mode_now": ACT_NOW,
        "newest_attempt": True,
        "decided_at": NOW - dt.timedelta(minutes=5),
        "expires_at": None,
        "now": NOW,
        **changes,
    }
    return decide_again_refusal(**values)


def test_decide_again_only_for_a_recent_recoverable_observe_mode_decision_while_the_mode_is_act() -> None:
    assert refusal() is None
    assert refusal(decided_at=NOW - DECIDE_AGAIN_WINDOW) is None
    assert "decided in act mode" in (refusal(decided_mode="act") or "")
    assert "vetoed" in (refusal(vetoed=True) or "")
    assert "already decided again" in (refusal(superseded=True) or "")
    assert "mode is observe now" in (refusal(mode_now=ModeDecision("observe", "ceiling off", "act")) or "")
    assert "later attempt" in (refusal(newest_attempt=False) or "")
    assert "expired" in (refusal(expires_at=NOW - dt.timedelta(seconds=1)) or "")
    assert refusal(expires_at=NOW + dt.timedelta(hours=1)) is None
    assert "only a recent failure" in (refusal(decided_at=NOW - DECIDE_AGAIN_WINDOW - dt.timedelta(seconds=1)) or "")
