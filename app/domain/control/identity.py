"""Attempt identity: the deterministic attempt UUID, attempt references, and Slurm job-id reuse."""

from __future__ import annotations

import datetime as dt
import re
import uuid
from dataclasses import dataclass
from typing import Literal

# Fixed forever: changing it would change every stored heimdallJobId.
ATTEMPT_NAMESPACE = uuid.UUID("7319518a-af2c-4d76-81e0-5c3b07e362df")

# Slurm job ids are uint32; attempt indexes are stored in a 32-bit signed column.
MAX_SLURM_JOB_ID = 2**32 - 1
MAX_ATTEMPT_INDEX = 2**31 - 1

_INDEX_REF = re.compile(r"([0-9]{1,10})[-/]([0-9]{1,10})", re.ASCII)
_UUID_REF = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", re.ASCII)


def attempt_uuid(cluster: str, job_id: int, attempt_index: int) -> str:
    """The attempt's stable UUID (heimdallJobId): uuid5 of "<cluster>/<jobId>/<attemptIndex>"."""
    if not cluster:
        raise ValueError("cluster must be a non-empty name")
    _check_numbers(job_id, attempt_index)
    return str(uuid.uuid5(ATTEMPT_NAMESPACE, f"{cluster}/{job_id}/{attempt_index}"))


def format_attempt_ref(job_id: int, attempt_index: int) -> str:
    """The "<jobId>-<attemptIndex>" form users type and the REST API shows."""
    _check_numbers(job_id, attempt_index)
    return f"{job_id}-{attempt_index}"


@dataclass(frozen=True)
class AttemptRef:
    """A parsed attempt reference: by (job id, attempt index) or by attempt UUID."""

    kind: Literal["index", "uuid"]
    job_id: int | None = None
    attempt_index: int | None = None
    uuid: str | None = None


def parse_attempt_ref(text: str) -> AttemptRef | None:
    """Parse "<jobId>-<attemptIndex>", "<jobId>/<attemptIndex>" or a UUID; None for anything else."""
    if not isinstance(text, str):
        return None
    candidate = text.strip()
    match = _INDEX_REF.fullmatch(candidate)
    if match:
        job_id, attempt_index = int(match.group(1)), int(match.group(2))
        if not 1 <= job_id <= MAX_SLURM_JOB_ID or attempt_index > MAX_ATTEMPT_INDEX:
            return None
        return AttemptRef(kind="index", job_id=job_id, attempt_index=attempt_index)
    if _UUID_REF.fullmatch(candidate):
        return AttemptRef(kind="uuid", uuid=str(uuid.UUID(candidate)))
    return None


_SCHEDULER_ID = re.compile(r"([0-9]{1,10})(?:_([0-9]{1,10}))?", re.ASCII)


@dataclass(frozen=True)
class SchedulerJobId:
    """A job as Slurm users name it: `1234` (a job id) or `1234_7` (task 7 of array 1234)."""

    job_id: int  # the job id, or the array's id when task is set
    task: int | None = None

    def __str__(self) -> str:
        return f"{self.job_id}_{self.task}" if self.task is not None else str(self.job_id)


def format_scheduler_job_id(job_id: int, array_job_id: int | None, array_task_id: int | None) -> str:
    """How Slurm users name a job: `1234_7` for task 7 of array 1234 (whatever its own id), else `1234`."""
    if array_job_id is not None and array_task_id is not None:
        return f"{array_job_id}_{array_task_id}"
    return str(job_id)


def parse_scheduler_job_id(text: str) -> SchedulerJobId | None:
    """Parse `1234` or `1234_7` (surrounding spaces allowed); None for anything else or out of range."""
    if not isinstance(text, str):
        return None
    match = _SCHEDULER_ID.fullmatch(text.strip())
    if not match:
        return None
    job_id = int(match.group(1))
    task = int(match.group(2)) if match.group(2) is not None else None
    if not 1 <= job_id <= MAX_SLURM_JOB_ID or (task is not None and task > MAX_ATTEMPT_INDEX):
        return None
    return SchedulerJobId(job_id, task)


def _check_numbers(job_id: int, attempt_index: int) -> None:
    # bool is an int subclass; True as a job id is always a bug.
    if isinstance(job_id, bool) or not isinstance(job_id, int) or not 1 <= job_id <= MAX_SLURM_JOB_ID:
        raise ValueError(f"job id must be an integer in 1..{MAX_SLURM_JOB_ID}, got {job_id!r}")
    if (
        isinstance(attempt_index, bool)
        or not isinstance(attempt_index, int)
        or not 0 <= attempt_index <= MAX_ATTEMPT_INDEX
    ):
        raise ValueError(f"attempt index must be an integer in 0..{MAX_ATTEMPT_INDEX}, got {attempt_index!r}")


@dataclass(frozen=True)
class SubmissionFingerprint:
    """What identifies one submission behind a Slurm job id (stored, or as observed now)."""

    submit_time: dt.datetime | None
    name: str | None
    comment: str | None
    restart_count: int = 0


def job_id_reuse_reason(stored: SubmissionFingerprint, observed: SubmissionFingerprint) -> str | None:
    """Why the observed job is a different submission than the stored one, or None when it is the same.

    Slurm resets a job's submit time on every requeue (``batch_requeue_fini`` sets
    ``submit_time = now`` once the requeued attempt has finished completing, in 22.05 and
    later), so a later submit time is expected whenever the restart count grew, and also
    once more at the same restart count (the counter is bumped at the requeue call, the
    submit time only when the old attempt finished completing). What a requeue never does:
    lower the restart count, move the submit time backwards, change the submit time of a
    job that was never requeued, or change name/comment. A missing value (None or "", e.g.
    sacct without ``AccountingStoreFlags=job_comment``) is unknown and never compared.
    """
    if observed.restart_count < stored.restart_count:
        return f"restart count went back from {stored.restart_count} to {observed.restart_count}"
    if _known(stored.name) and _known(observed.name) and stored.name != observed.name:
        return f"job name changed from {stored.name!r} to {observed.name!r}"
    if _known(stored.comment) and _known(observed.comment) and stored.comment != observed.comment:
        return "job comment changed"
    if (
        stored.submit_time is not None
        and observed.submit_time is not None
        and stored.submit_time != observed.submit_time
    ):
        if observed.submit_time < stored.submit_time:
            return f"submit time moved back from {stored.submit_time.isoformat()} to {observed.submit_time.isoformat()}"
        if observed.restart_count == 0:
            return (
                f"submit time changed from {stored.submit_time.isoformat()} to {observed.submit_time.isoformat()} "
                "although the job was never requeued"
            )
    return None


def is_job_id_reused(stored: SubmissionFingerprint, observed: SubmissionFingerprint) -> bool:
    """True when the observed job is a new submission that merely reuses the stored job's id."""
    return job_id_reuse_reason(stored, observed) is not None


def _known(value: str | None) -> bool:
    return bool(value)
