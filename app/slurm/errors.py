"""Failures of Slurm commands, classified so callers can tell "retry later" from "never will work"."""

from __future__ import annotations

from collections.abc import Sequence

from app.slurm.records import Snapshot


class SchedulerError(Exception):
    """A scheduler command failed; carries the argv, exit code, stderr and how long it took."""

    def __init__(
        self,
        message: str,
        *,
        command: Sequence[str] = (),
        returncode: int | None = None,
        stderr: str = "",
        duration: float | None = None,
    ) -> None:
        self.command = tuple(command)
        self.returncode = returncode
        self.stderr = stderr
        self.duration = duration
        detail = f"{message} (command: {' '.join(self.command) or '-'}; exit code: {returncode}"
        if stderr.strip():
            detail += f"; stderr: {stderr.strip()[:2000]}"
        super().__init__(detail + ")")
        self.message = message


class JobNotFound(SchedulerError):
    """Slurm does not know the job id ("Invalid job id specified")."""


class OperationDisabled(SchedulerError):
    """Slurm refuses the operation for this job, e.g. requeue of a --no-requeue job."""


class JobStateConflict(SchedulerError):
    """The job is in a state where the operation makes no sense (already finished, pending, ...); re-observe."""


class TransientSchedulerError(SchedulerError):
    """The controller could not be reached or answered in time, or failed in an unknown way; retry later."""


# Substrings of Slurm's stderr, checked in order; the first match decides the class.
_CLASSIFICATION: tuple[tuple[str, type[SchedulerError]], ...] = (
    ("invalid job id specified", JobNotFound),
    ("requested operation is presently disabled", OperationDisabled),
    ("unable to contact slurm controller", TransientSchedulerError),
    ("socket timed out", TransientSchedulerError),
    ("connection refused", TransientSchedulerError),
    ("connection reset by peer", TransientSchedulerError),  # slurmctld going down mid-request
    ("slurm_persist_conn_open", TransientSchedulerError),
    ("job has already finished", JobStateConflict),
    ("already completing or completed", JobStateConflict),
    ("job is pending execution", JobStateConflict),
    ("job is no longer pending execution", JobStateConflict),
)


def classify(
    command: Sequence[str], returncode: int | None, stderr: str, *, duration: float | None = None
) -> SchedulerError:
    """Turn a failed command into the most specific SchedulerError its stderr allows."""
    lowered = stderr.lower()
    for needle, cls in _CLASSIFICATION:
        if needle in lowered:
            return cls(needle, command=command, returncode=returncode, stderr=stderr, duration=duration)
    return TransientSchedulerError(
        "command failed with unrecognised output",
        command=command,
        returncode=returncode,
        stderr=stderr,
        duration=duration,
    )


def require_observation(snapshot: Snapshot) -> Snapshot:
    """The snapshot, unless Slurm answered with errors: then TransientSchedulerError ("could not observe").

    During a slurmctld outage 22.05's `squeue --json` exits 0 with `errors: [{"source":
    "slurm_load_jobs", "description": "Failed while looking for jobs"}]` and `jobs: []`, while
    24.11 and 26.05 exit 1 ("Unable to contact slurm controller"). Both are the same outage: an
    answer that carries Slurm's own errors is never taken as the list of jobs, whatever its exit code.
    """
    errors = snapshot.slurm_errors
    if errors:
        raise TransientSchedulerError(
            f"Slurm answered with errors instead of its jobs ({len(snapshot.jobs)} listed)",
            stderr="; ".join(errors),
            duration=snapshot.duration,
        )
    return snapshot
