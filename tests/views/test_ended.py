"""Why an attempt ended: one plain sentence, never the observer's notes, never a dash on a failed attempt."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from views.ended import why_ended


def _attempt(state: str, **values: Any) -> Any:
    base = {"attempt_index": 0, "exit_code": None, "exit_signal": None, "ended_reason": None, "state_reason": None}
    return SimpleNamespace(state=state, **{**base, **values})


def test_a_failed_attempt_without_a_reason_still_says_why() -> None:
    text = why_ended(_attempt("FAILED", exit_code=1, ended_reason="NonZeroExitCode"))
    assert text.startswith("It failed, exit code 1 (") and "NonZeroExitCode" not in text
    assert why_ended(_attempt("FAILED")) == "It failed."
    assert why_ended(_attempt("OUT_OF_MEMORY")) == "It ran out of memory."
    assert why_ended(_attempt("RUNNING")) == "It has not ended."


def test_the_observers_notes_become_plain_words() -> None:
    text = why_ended(
        _attempt(
            "FAILED",
            exit_code=1,
            ended_reason="ended between two looks (it was seen running); final state from Slurm accounting (sacct)",
        )
    )
    assert "between two looks" not in text and text.startswith("It failed, exit code 1")
    assert "Slurm's accounting" in text


def test_an_attempt_recovery_requeued_says_so() -> None:
    requeued = _attempt("REQUEUED", ended_reason="requeued by Slurm: a new attempt of the job started")
    restart = SimpleNamespace(id=9, mode="act", operation="RESTART")
    assert why_ended(requeued, restart) == "Recovery requeued it to restart as attempt 1 (Advice 9)."
    observed = SimpleNamespace(id=9, mode="observe", operation="RESTART")
    assert why_ended(requeued, observed).startswith("Slurm requeued it")
