"""The scheduler interface the rest of Recovery depends on (Slurm CLI in production, a fake in unit tests)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from app.slurm.records import AccountingRecord, CommandResult, SlurmJob, Snapshot

__all__ = [
    "Scheduler",
    "JobLookup",
    "JobTarget",
    "Snapshot",
    "SlurmJob",
    "AccountingRecord",
    "CommandResult",
    "job_target",
    "target_text",
    "node_text",
]

# What a command acts on: a plain job id, or "<array job id>_<task id>" for exactly one array task.
# The last task of an array keeps the array's own id, and Slurm reads that bare id as "the whole
# array" (`scontrol requeuehold 151` requeues every task), so an array task is always named by
# its pair (`scontrol requeuehold 151_4`), which means that one task on every Slurm version.
JobTarget = int | str
_TARGET = re.compile(r"([1-9][0-9]{0,9})(?:_([0-9]{1,10}))?")


def job_target(job_id: int, array_job_id: int | None = None, array_task_id: int | None = None) -> str:
    """The name of exactly one job for Slurm's commands: `<array id>_<task id>` for an array task."""
    if array_job_id and array_task_id is not None:
        return f"{int(array_job_id)}_{int(array_task_id)}"
    return str(int(job_id))


def target_text(target: JobTarget) -> str:
    """A JobTarget checked and normalised (`151`, `151_4`); ValueError for anything else."""
    if isinstance(target, bool):
        raise ValueError(f"not a Slurm job id: {target!r}")
    if isinstance(target, int):
        if target < 1:
            raise ValueError(f"not a Slurm job id: {target!r}")
        return str(target)
    text = str(target).strip()
    if not _TARGET.fullmatch(text):
        raise ValueError(f"not a Slurm job id or <array id>_<task id>: {text[:40]!r}")
    return text


_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def node_text(node: str) -> str:
    """One node's name for Slurm's commands (never a hostlist expression such as node[1-9]); ValueError otherwise."""
    text = str(node).strip()
    if not _NODE.fullmatch(text):
        raise ValueError(f"not a single node name: {text[:40]!r}")
    return text


@dataclass(frozen=True, slots=True)
class JobLookup:
    """What is still known about one job: slurmctld's view if it has one, and accounting's attempts."""

    job_id: int
    job: SlurmJob | None
    history: tuple[AccountingRecord, ...] | None  # None: no accounting (neither slurmdbd nor jobcomp)

    @property
    def found(self) -> bool:
        return self.job is not None or bool(self.history)

    @property
    def last_record(self) -> AccountingRecord | None:
        return self.history[-1] if self.history else None


@runtime_checkable
class Scheduler(Protocol):
    """Observe and act on one Slurm cluster. Failures raise app.slurm.errors.SchedulerError subclasses.

    The four actions take a JobTarget: callers name an array task as `<array id>_<task id>`.
    """

    async def list_jobs(self) -> Snapshot:
        """Every job slurmctld knows, from ONE bulk query (one per observer tick)."""
        ...

    async def requeue_hold(self, job: JobTarget) -> CommandResult:
        """Requeue the job into a held state (ends a running attempt); `scontrol requeuehold`."""
        ...

    async def set_excluded_nodes(self, job: JobTarget, nodes: Sequence[str]) -> CommandResult:
        """Replace the job's excluded nodes (an empty list clears them); `scontrol update ExcNodeList=`."""
        ...

    async def release(self, job: JobTarget) -> CommandResult:
        """Release a held job so it may start again; `scontrol release`."""
        ...

    async def cancel(self, job: JobTarget) -> CommandResult:
        """Cancel the job; a job that already ended is not an error."""
        ...

    async def job_history(self, job_id: int) -> list[AccountingRecord] | None:
        """Every attempt accounting knows, oldest first; None when the cluster keeps no accounting."""
        ...

    async def lookup_job(self, job_id: int) -> JobLookup:
        """Everything still known about a job that may have left squeue."""
        ...

    async def partition_nodes(self, partition: str) -> tuple[str, ...] | None:
        """Every node of the partition, sorted; None when Slurm knows no node in it (unknown partition)."""
        ...
