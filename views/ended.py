"""Why an attempt ended, as one plain sentence for Job Details and the workflow page (never the observer's notes)."""

from __future__ import annotations

from typing import Any

from app.domain.presentation import glossary

# Slurm's end states in words a person reads without the manual.
_STATE_WORDS = {
    "COMPLETED": "It finished normally",
    "FAILED": "It failed",
    "CANCELLED": "It was cancelled",
    "TIMEOUT": "It ran past its time limit",
    "NODE_FAIL": "A node it ran on failed",
    "OUT_OF_MEMORY": "It ran out of memory",
    "PREEMPTED": "It was preempted by a higher-priority job",
    "BOOT_FAIL": "Its nodes failed to boot",
    "DEADLINE": "It reached its deadline",
    "UNKNOWN": "Recovery could not learn how it ended",
}
_SAYS_NOTHING_MORE = {"", "None", "NonZeroExitCode"}  # Slurm reasons the state and exit code already say
_RUNNING = {"PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "REQUEUE_HOLD", "RESIZING"}
# The observer's own notes (worker/observer.py) start with these; they describe how it learned, not why it ended.
_OBSERVER_NOTES = ("ended between two looks", "ended before Recovery saw it run", "left squeue", "requeued by Slurm")


def why_ended(attempt: Any, advice: Any = None) -> str:
    """One sentence: who ended the attempt and how (exit code in words), or that it has not ended."""
    state = (attempt.state or "UNKNOWN").upper()
    if state in _RUNNING:
        return "It has not ended."
    exit_words = ""
    if attempt.exit_code is not None and (attempt.exit_code or attempt.exit_signal):
        exit_words = f", exit code {attempt.exit_code} ({glossary.exit_text(attempt.exit_code, attempt.exit_signal)})"
    if state == "REQUEUED":
        if advice is not None and advice.mode == "act" and advice.operation == "RESTART":
            return f"Recovery requeued it to restart as attempt {attempt.attempt_index + 1} (Advice {advice.id})."
        return "Slurm requeued it and started the next attempt; Slurm's accounting does not say how this one ended."
    reason = (attempt.ended_reason or "").strip()
    if reason not in _SAYS_NOTHING_MORE and not reason.startswith(_OBSERVER_NOTES):
        return f"{_STATE_WORDS.get(state, f'It ended {state}')}: {reason}{exit_words}."
    text = _STATE_WORDS.get(state, f"It ended {state}") + exit_words
    if (attempt.state_reason or "") not in _SAYS_NOTHING_MORE:
        text += f" (Slurm's reason: {attempt.state_reason})"
    if reason.startswith(_OBSERVER_NOTES[:3]):
        text += "; Recovery read this from Slurm's accounting after the job left the queue"
    return text + "."
