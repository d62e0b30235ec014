"""The one-sentence story of an attempt: what happened, what was decided, whether it happened."""

from __future__ import annotations

from app.domain.presentation.story import AdviceFact, AnomalyFact, AttemptFacts, NextFact, Outcome, shown_reason, tell

XID = AnomalyFact(kind="CRASH", category="xid", node="gpu-a02", xid=79, line_number=1312, log_path="/logs/x-0.err")


def test_a_recovered_attempt_names_the_failure_the_restart_and_the_checkpoint_loaded() -> None:
    story = tell(
        AttemptFacts(
            attempt_index=0,
            state="FAILED",
            anomaly=XID,
            advice=AdviceFact(operation="RESTART", mode="act", rule="restart_allowed", exclusions=("gpu-a02",)),
            next_attempt=NextFact(
                attempt_index=1,
                state="RUNNING",
                nodes=("gpu-a03",),
                started=True,
                loaded_checkpoint=True,
                loaded_iteration=1200,
            ),
        )
    )
    assert story.outcome is Outcome.RECOVERED
    assert story.sentence == (
        "Attempt 0 crashed (Xid 79) on gpu-a02 at line 1312 of x-0.err; Recovery restarted it excluding gpu-a02; "
        "attempt 1 started on gpu-a03 and loaded checkpoint iteration 1200."
    )


def test_a_restart_still_in_the_queue_says_so() -> None:
    story = tell(
        AttemptFacts(
            attempt_index=2,
            state="FAILED",
            advice=AdviceFact(operation="RESTART", mode="act"),
            next_attempt=NextFact(attempt_index=3, state="PENDING"),
        )
    )
    assert story.result == "attempt 3 is waiting in the queue"
    assert story.outcome is Outcome.RECOVERED


def test_a_stop_names_the_rule_and_says_resubmit() -> None:
    story = tell(
        AttemptFacts(
            attempt_index=1,
            state="FAILED",
            exit_code=1,
            nodes=("gpu-a01",),
            advice=AdviceFact(operation="TERMINATE", mode="act", rule="retry_limit"),
            saved_iteration=1200,
        )
    )
    assert story.outcome is Outcome.STOPPED
    assert (
        story.sentence == "Attempt 1 ended FAILED on gpu-a01, exit code 1; Recovery stopped here by rule retry_limit; "
        "stopped: resubmit (sbatch the same script) to resume from checkpoint iteration 1200."
    )


def test_observe_mode_never_says_it_acted() -> None:
    story = tell(
        AttemptFacts(
            attempt_index=0,
            state="FAILED",
            anomaly=AnomalyFact(kind="NO_PROGRESS", category="hang"),
            advice=AdviceFact(operation="RESTART", mode="observe", exclusions=("gpu-a02",), shadow_actions=3),
        )
    )
    assert story.outcome is Outcome.OBSERVE_ONLY
    assert "observe only: would have restarted as attempt 1 excluding gpu-a02" in story.sentence
    assert "nothing was done" in story.result


def test_a_vetoed_restart_is_a_stop() -> None:
    story = tell(
        AttemptFacts(
            attempt_index=0, state="FAILED", advice=AdviceFact(operation="RESTART", mode="act", review="VETOED")
        )
    )
    assert story.outcome is Outcome.STOPPED and "vetoed" in story.decided


def test_without_advice_the_state_tells() -> None:
    assert tell(AttemptFacts(attempt_index=0, state="RUNNING", nodes=("n1",))).sentence == "Attempt 0 is running on n1."
    assert tell(AttemptFacts(attempt_index=0, state="COMPLETED")).outcome is Outcome.COMPLETED
    failed = tell(AttemptFacts(attempt_index=0, state="FAILED"))
    assert failed.outcome is Outcome.STOPPED
    assert failed.result == "stopped: resubmit (sbatch the same script); no checkpoint save was seen in its logs"
    watched = tell(AttemptFacts(attempt_index=0, state="FAILED", enrolled=False))
    assert "not enrolled" in watched.decided


def test_observe_reasons_are_reworded() -> None:
    reason = "attempt 0 crashed: restart as attempt 1 excluding n2; retry 1 of 3."
    assert (
        shown_reason(reason, "observe")
        == "attempt 0 crashed: observe only: would have restarted as attempt 1 excluding n2; retry 1 of 3."
    )
    assert shown_reason(reason, "act") == reason


def test_a_resumed_attempt_says_which_checkpoint_it_loaded() -> None:
    story = tell(
        AttemptFacts(attempt_index=1, state="RUNNING", nodes=("n3",), resumed_checkpoint=True, resumed_iteration=1200)
    )
    assert story.sentence == "Attempt 1 is running on n3 after loading checkpoint iteration 1200."


def test_a_restart_held_by_a_budget_is_not_told_as_a_recovery() -> None:
    story = tell(
        AttemptFacts(
            attempt_index=0,
            state="FAILED",
            advice=AdviceFact(operation="RESTART", mode="act", held="a recovery budget"),
        )
    )
    assert story.outcome is Outcome.RUNNING
    assert story.result == "held by a recovery budget: waits for an operator to release it"
    assert "restarted" not in story.sentence
