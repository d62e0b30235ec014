"""The one glossary of Recovery's words (dashboard tooltips and docs/glossary.md), and exit codes in plain words.

`python -m app.domain.presentation.glossary` prints docs/glossary.md (tests/domain/test_glossary.py checks it).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Term:
    """A word that must stay (it is in the API, Slurm or the logs) and what it means in plain words."""

    term: str
    plain: str  # a few words, shown beside the term
    meaning: str  # one or two sentences, shown in the tooltip and the docs


TERMS: tuple[Term, ...] = (
    Term(
        "Advice",
        "Recovery's decision",
        "What Recovery decided to do about an attempt that failed or hung: "
        "RESTART (requeue the job, maybe excluding bad nodes) or TERMINATE (stop retrying). One Advice per attempt.",
    ),
    Term(
        "RESTART",
        "requeue the job",
        "The Advice asks Slurm to requeue the job as its next attempt, optionally with nodes excluded.",
    ),
    Term(
        "TERMINATE",
        "stop retrying",
        "The Advice says Recovery will not retry: the job stays ended. Resubmit it yourself once the cause is fixed.",
    ),
    Term(
        "generation",
        "revision of the Advice",
        "A counter that grows each time the Advice for an attempt is "
        "changed (for example new exclusions). Scheduler actions name the generation they carried out, so an old "
        "action is never mistaken for the current decision.",
    ),
    Term(
        "observed generation",
        "last generation carried out",
        "The generation the controller last saw fully "
        "applied in Slurm. Equal to the generation: done; lower: still working on it.",
    ),
    Term(
        "reconciliation",
        "checking Slurm matches the decision",
        "The controller compares what the Advice asks "
        "for with what Slurm shows, runs the scheduler commands that are missing and records the outcome.",
    ),
    Term(
        "PENDING",
        "not settled yet",
        "Reconciliation is still under way (or waits for permission): the Advice "
        "has not been carried out or confirmed.",
    ),
    Term(
        "CONVERGED",
        "settled",
        "Slurm shows what the Advice asked for. Read the reason to see whether "
        "Recovery did it (DESIRED_STATE_OBSERVED) or nothing had to be done (ALREADY_SATISFIED).",
    ),
    Term(
        "ABANDONED",
        "given up",
        "The Advice could not be carried out and will not be retried (the reason says "
        "why: the job is gone, requeue is disabled, Slurm's own retry limit, a newer attempt...).",
    ),
    Term(
        "DESIRED_STATE_OBSERVED",
        "done, and seen done",
        "Recovery ran the scheduler commands and then saw in Slurm that the job is where the Advice wanted it.",
    ),
    Term(
        "ALREADY_SATISFIED",
        "nothing to do",
        "Slurm already was where the Advice wanted it, so no scheduler "
        "command was run (for TERMINATE: the job had ended and stays ended).",
    ),
    Term(
        "ADVICE_EXPIRED",
        "decision too old",
        "The Advice was not carried out before its expiry time, so it was dropped rather than acting on stale facts.",
    ),
    Term("JOB_NOT_FOUND", "Slurm forgot the job", "Slurm no longer knows the job id, so nothing can be requeued."),
    Term(
        "REQUEUE_DISABLED",
        "job cannot be requeued",
        "The job was submitted without --requeue (or the site disables requeue), so Slurm refuses to requeue it.",
    ),
    Term(
        "RETRIES_EXHAUSTED_BY_SLURM",
        "Slurm's retry limit",
        "Slurm's own MaxBatchRequeue limit was reached, so Slurm will not requeue the job again.",
    ),
    Term("SUPERSEDED", "overtaken", "A newer attempt or decision replaced this one before it was carried out."),
    Term(
        "NOT_AUTHORIZED",
        "not allowed to act",
        "Recovery may not run scheduler commands for this job "
        "(observe mode, or the operator has not acknowledged scheduler actions); approval cannot change that.",
    ),
    Term(
        "DECIDED_IN_OBSERVE",
        "decided in observe mode; not carried out",
        "The Advice was decided while the job was in observe mode. It is never carried out, even after the mode "
        "became act; an operator may decide a recent failure again now, which makes a new Advice.",
    ),
    Term(
        "SHADOW",
        "observe mode: not run",
        "The scheduler command that act mode would have run. In observe mode it is only recorded, never sent to Slurm.",
    ),
    Term("observe", "watch only", "Mode in which Recovery detects and decides but never changes a job in Slurm."),
    Term("act", "allowed to act", "Mode in which Recovery may requeue, hold, release or exclude nodes for the job."),
    Term(
        "attempt",
        "one run of the job",
        "Each execution of a Slurm job id; attempt 0 is the first, each requeue starts the next one.",
    ),
    Term(
        "workflow",
        "a training run",
        "The attempts and jobs that belong to one training run (the policy's workflow_id), even across resubmissions.",
    ),
    Term(
        "enrolment",
        "admitted or not",
        "Whether Recovery looks after the job: enrolled, or not enrolled with "
        "the reason (no policy, invalid policy, unmanaged partition, environment mismatch...).",
    ),
    Term(
        "heimdallJobId",
        "attempt id (UUID)",
        "The stable UUID of an attempt, derived from cluster, job id and "
        "attempt index; the same in the API, the dashboard URLs and the logs.",
    ),
    Term(
        "NonZeroExitCode",
        "the script exited with an error",
        "Slurm's reason for a job whose batch script "
        "ended with an exit code other than 0; see the exit code for what it means.",
    ),
    Term(
        "REQUEUE_HOLD",
        "requeued and held",
        "The job was requeued but is held so the controller can set node "
        "exclusions before it is released to run again.",
    ),
    Term("REQUEUED", "sent back to the queue", "Slurm put the job back in the queue; a new attempt follows."),
    Term(
        "exclusion",
        "nodes to avoid",
        "Nodes the next attempt must not run on (Slurm's ExcNodeList), because the evidence blamed them.",
    ),
    Term(
        "Xid",
        "NVIDIA GPU error code",
        "An error number the NVIDIA driver writes to the kernel log (for example "
        "Xid 79: the GPU fell off the bus). Only a node named in the evidence is excluded; a line without a "
        "node name (Node —) blames no node.",
    ),
    Term(
        "anomaly",
        "a problem found",
        "A crash signature, hang, slowdown or scheduler failure found in the logs or in Slurm's state.",
    ),
    Term(
        "hang",
        "no progress",
        "The log stayed silent for longer than the policy's threshold "
        "(log_based_timeout_threshold_*), so the job is treated as stuck.",
    ),
    Term(
        "checkpoint",
        "saved training state",
        "A checkpoint save or load seen in the log. It is a log event, not proof that the file can be loaded.",
    ),
    Term(
        "incarnation",
        "reuse of a job id",
        "Slurm can reuse a job id after a restart of its database; each "
        "reuse is a new incarnation, kept apart from the old one.",
    ),
)

BY_NAME: dict[str, Term] = {t.term: t for t in TERMS}

SIGNALS: dict[int, tuple[str, str]] = {
    1: ("SIGHUP", "its terminal or parent went away"),
    2: ("SIGINT", "interrupted (Ctrl-C)"),
    4: ("SIGILL", "illegal instruction (a binary built for another CPU?)"),
    6: ("SIGABRT", "the program aborted itself (assertion, C++ exception, NCCL/CUDA abort)"),
    7: ("SIGBUS", "bus error (often a truncated memory-mapped file or shared memory too small)"),
    8: ("SIGFPE", "arithmetic error"),
    9: (
        "SIGKILL",
        "killed outright: the out-of-memory killer, Slurm at the time limit or scancel after the grace period",
    ),
    11: ("SIGSEGV", "segmentation fault: a crash in native code"),
    13: ("SIGPIPE", "wrote to a closed pipe"),
    15: ("SIGTERM", "asked to stop: scancel, preemption, or Slurm at the time limit"),
}
EXIT_CODES: dict[int, str] = {
    0: "success",
    1: "the program reported an error (see the log's last lines)",
    2: "misuse of a shell command or bad arguments",
    126: "the command could not be executed (permissions?)",
    127: "command not found (PATH, module or environment not loaded?)",
    255: "exit status out of range, or ssh/srun failed",
}


def signal_text(signal: int) -> str:
    """`SIGKILL (killed outright: ...)` for a signal number, `signal N` when unknown."""
    found = SIGNALS.get(signal)
    return f"{found[0]} ({found[1]})" if found else f"signal {signal}"


def exit_text(code: int | None, signal: int | None = None) -> str:
    """An exit status in plain words: 137 is 128 + 9, killed by SIGKILL; 139 SIGSEGV; 143 SIGTERM."""
    if signal:
        return "killed by " + signal_text(signal)
    if code is None:
        return ""
    if 128 < code < 128 + 65:
        return f"128 + {code - 128}: killed by " + signal_text(code - 128)
    return EXIT_CODES.get(code, "the program's own error code (see the log)")


def render_markdown() -> str:
    """docs/glossary.md."""
    lines = [
        "# Glossary",
        "",
        "Generated from `app/domain/presentation/glossary.py`",
        "(`python -m app.domain.presentation.glossary > docs/glossary.md`); the dashboard",
        "shows the same text as tooltips (the dotted words) and at `/dashboard/glossary`.",
        "",
        "| term | in plain words | meaning |",
        "| --- | --- | --- |",
    ]
    lines += [f"| `{t.term}` | {t.plain} | {t.meaning} |" for t in TERMS]
    lines += ["", "## Exit codes and signals", "", "| exit | meaning |", "| --- | --- |"]
    lines += [f"| {code} | {text} |" for code, text in EXIT_CODES.items()]
    lines += [f"| {128 + n} | killed by {signal_text(n)} |" for n in SIGNALS]
    lines += ["", "An exit code above 128 means the process died from signal (code − 128)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover
    sys.stdout.write(render_markdown())
