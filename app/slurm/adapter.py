"""The scheduler interface the rest of Recovery depends on (Slurm CLI in production, a fake in unit tests)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from app.slurm.records import AccountingRecord, CommandResult, SlurmJob, Snapshot

__all__ = ["Scheduler", "JobLookup", "Snapshot", "SlurmJob", "AccountingRecord", "CommandResult"]


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
    """Observe and act on one Slurm cluster. Failures raise app.slurm.errors.SchedulerError subclasses."""

    async def list_jobs(self) -> Snapshot:
        """Every job slurmctld knows, from ONE bulk query (one per observer tick)."""
        ...

    async def requeue_hold(self, job_id: int) -> CommandResult:
        """Requeue the job into a held state (ends a running attempt); `scontrol requeuehold`."""
        ...

    async def set_excluded_nodes(self, job_id: int, nodes: Sequence[str]) -> CommandResult:
        """Replace the job's excluded nodes (an empty list clears them); `scontrol update ExcNodeList=`."""
        ...

    async def release(self, job_id: int) -> CommandResult:
        """Release a held job so it may start again; `scontrol release`."""
        ...

    async def cancel(self, job_id: int) -> CommandResult:
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
