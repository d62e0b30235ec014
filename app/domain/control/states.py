"""The one Slurm job-state vocabulary: which base states are active, ended, failed, a clean end or held.

Every reader of a Slurm state (the squeue parser, the job records, reconciliation, the advice
rules, the dashboard's timeline) takes its sets from here, so a state means the same everywhere.
"""

from __future__ import annotations

# The attempt is still with Slurm: waiting, starting, running, suspended or winding down.
ACTIVE: frozenset[str] = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "SUSPENDED",
        "RESIZING",
        "STOPPED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "SIGNALING",
        "STAGE_OUT",
    }
)
# Executing (the dashboard's "running" group): output may appear at any moment.
EXECUTING: frozenset[str] = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "STAGE_OUT", "SIGNALING"})
# The attempt ended without finishing its work.
FAILED: frozenset[str] = frozenset(
    {"FAILED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED"}
)
# Failures worth a retry decision (a deadline or a preemption is not the job's fault to fix by requeueing).
RETRYABLE_FAILED: frozenset[str] = frozenset({"FAILED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL"})
# An end that was not a failure: the job finished or someone cancelled it.
CLEAN_END: frozenset[str] = frozenset({"COMPLETED", "CANCELLED"})
# Final states of a Slurm job: nothing more happens to it unless it is requeued.
TERMINAL: frozenset[str] = FAILED | CLEAN_END
# The attempt is over (our records): terminal, or replaced, lost or revoked.
ENDED: frozenset[str] = TERMINAL | {"UNKNOWN", "REQUEUED", "SPECIAL_EXIT", "REVOKED"}
# The job waits to (re)start and can therefore be held.
HELD: frozenset[str] = frozenset({"PENDING", "SPECIAL_EXIT", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})
# squeue's end_time is real rather than a projection: the current execution has stopped.
EXECUTION_STOPPED: frozenset[str] = TERMINAL | {
    "SPECIAL_EXIT",
    "REQUEUED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "REVOKED",
    "COMPLETING",
}
# States in which `scontrol requeuehold` ends or re-queues the attempt (Slurm refuses PENDING jobs).
REQUEUEABLE: frozenset[str] = TERMINAL | {"RUNNING", "SUSPENDED", "CONFIGURING", "COMPLETING", "STOPPED"}
