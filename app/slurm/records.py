"""Normalised, immutable views of what Slurm reports, independent of its JSON version."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """One job as slurmctld sees it now (one element of `squeue --json` / slurmrestd `jobs`).

    Conventions: node lists are expanded tuples; times are aware UTC datetimes or None
    (`start_time` is None while PENDING and `end_time` is None until the job has ended, because
    Slurm fills both with estimates there; `nodes` is empty while PENDING, because a requeued job
    still lists its previous attempt's nodes while they finish cleaning up); `state_reason` is None
    when Slurm says "None".
    """

    job_id: int
    name: str
    user: str
    partition: str
    state: str
    state_flags: tuple[str, ...]
    state_reason: str | None
    state_description: str | None
    requeue: bool
    restart_count: int
    comment: str
    exit_code: int | None
    exit_signal: int | None
    nodes: tuple[str, ...]
    excluded_nodes: tuple[str, ...]
    batch_host: str | None
    stdout_raw: str | None
    stderr_raw: str | None
    stdout: str | None
    stderr: str | None
    submit_time: datetime | None
    start_time: datetime | None
    end_time: datetime | None
    held: bool
    hold_reason: str | None
    priority: int | None
    working_directory: str | None
    array_job_id: int | None
    array_task_id: int | None
    array_task_string: str | None
    cluster: str | None
    # SLURM_TASKS_PER_NODE form ("4(x2)" or "3,2"), from tasks_per_node or ntasks over the nodes; None if unknown.
    tasks_per_node: str | None = None
    # heterogeneous job: the leader's id (shared by every component) and this component's offset
    het_job_id: int | None = None
    het_job_offset: int | None = None
    dependency: str | None = None  # e.g. "singleton(unfulfilled)"; None when the job has none
    # submitted with --requeue=expedite (25.11+, squeue's flags EXPEDITED_REQUEUE): on a node failure Slurm requeues
    # it at once by itself; when it fails on its own Slurm requeue-holds it ("holding expedited requeue")
    expedited_requeue: bool = False
    # The numeric uid/gid the job runs as (squeue's user_id/group_id): whose rights its files are read with.
    user_id: int | None = None
    group_id: int | None = None

    @property
    def array_task(self) -> bool:
        """One task of a job array (its own record, with a task id)."""
        return self.array_job_id is not None and self.array_task_id is not None

    @property
    def scheduler_id(self) -> str:
        """How Slurm's commands must name exactly this job: `<array id>_<task id>` for an array task."""
        if self.array_job_id is not None and self.array_task_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        return str(self.job_id)


@dataclass(frozen=True, slots=True)
class AccountingRecord:
    """One attempt of a job from accounting (`sacct -D`, jobcomp `sacct -c`, or `sacct --json`)."""

    job_id: int
    attempt: int  # 0-based order of this job's rows as accounting lists them
    state: str
    exit_code: int | None  # None when the source is known to lie (sacct --json on 22.05)
    exit_signal: int | None
    nodes: tuple[str, ...]
    start: datetime | None
    end: datetime | None
    submit: datetime | None = None
    reason: str | None = None
    comment: str | None = None
    source: str = "sacct"  # "sacct" (slurmdbd), "jobcomp" (sacct -c) or "sacct-json"


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Every job slurmctld knows at one instant (one bulk query), plus records that could not be read."""

    jobs: tuple[SlurmJob, ...]
    taken_at: datetime
    duration: float = 0.0  # seconds the query took
    problems: tuple[str, ...] = ()
    slurm_release: str | None = None
    data_parser: str | None = None
    by_id: dict[int, SlurmJob] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.by_id and self.jobs:
            object.__setattr__(self, "by_id", {job.job_id: job for job in self.jobs})

    def get(self, job_id: int) -> SlurmJob | None:
        """The job with this id, or None when slurmctld no longer lists it."""
        return self.by_id.get(int(job_id))

    @property
    def slurm_errors(self) -> tuple[str, ...]:
        """Errors Slurm itself put in the answer (its `errors` array), as opposed to records we could not read."""
        return tuple(problem for problem in self.problems if problem.startswith("slurm reported"))


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What one Slurm command returned and how long it took (for milestone timings)."""

    command: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    duration: float
