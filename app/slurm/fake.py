"""An in-memory Scheduler for UNIT tests of pure logic only; it proves nothing about real Slurm.

It mimics the transitions observed on Slurm 22.05 (see the lab notes): requeuehold puts a job in
PENDING, held, restart_count + 1; release un-holds it; requeue of a --no-requeue job is refused;
unknown ids raise JobNotFound. Jobs never start by themselves: tests call `start`/`finish`.
Integration behaviour is tested against the real lab (tests/slurm/test_cli_scheduler.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime

from app.slurm.adapter import JobLookup, JobTarget, target_text
from app.slurm.errors import JobNotFound, JobStateConflict, OperationDisabled, SchedulerError
from app.slurm.records import AccountingRecord, CommandResult, SlurmJob, Snapshot

_RUNNING_LIKE = frozenset({"RUNNING", "COMPLETING", "SUSPENDED"})


def make_job(job_id: int, **fields: object) -> SlurmJob:
    """A plausible SlurmJob with defaults, for tests (override any field by keyword)."""
    values: dict[str, object] = dict(
        job_id=job_id,
        name=f"job{job_id}",
        user="root",
        partition="debug",
        state="PENDING",
        state_flags=(),
        state_reason=None,
        state_description=None,
        requeue=True,
        restart_count=0,
        comment="",
        exit_code=0,
        exit_signal=0,
        nodes=(),
        excluded_nodes=(),
        batch_host=None,
        stdout_raw=None,
        stderr_raw=None,
        stdout=None,
        stderr=None,
        submit_time=datetime.now(UTC),
        start_time=None,
        end_time=None,
        held=False,
        hold_reason=None,
        priority=1,
        working_directory=None,
        array_job_id=None,
        array_task_id=None,
        array_task_string=None,
        cluster="lab",
        user_id=os.getuid(),  # tests write the job's files as this process's user
        group_id=os.getgid(),
    )
    values.update(fields)
    return SlurmJob(**values)  # type: ignore[arg-type]


class FakeScheduler:
    """Scheduler double holding jobs in a dict; records every call in `calls`."""

    def __init__(
        self,
        jobs: Sequence[SlurmJob] = (),
        *,
        accounting: bool = True,
        partitions: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.jobs: dict[int, SlurmJob] = {job.job_id: job for job in jobs}
        # the lab's layout unless a test says otherwise
        self.partitions: dict[str, tuple[str, ...]] = {
            name: tuple(nodes)
            for name, nodes in (
                partitions if partitions is not None else {"debug": ("node1", "node2", "node3")}
            ).items()
        }
        self.history: dict[int, list[AccountingRecord]] = {}
        self.accounting = accounting
        self.calls: list[tuple[str, int | None, tuple[str, ...]]] = []
        self.targets: list[tuple[str, str]] = []  # (method, the target as the caller named it: "151" or "151_4")
        self.failures: dict[str, list[SchedulerError]] = {}
        self.drained: set[str] = set()

    # ------------------------------------------------------------ test controls

    def add(self, job: SlurmJob) -> SlurmJob:
        self.jobs[job.job_id] = job
        return job

    def fail_next(self, method: str, error: SchedulerError) -> None:
        """Make the next call of `method` raise `error` (queued; one per call)."""
        self.failures.setdefault(method, []).append(error)

    def start(self, job_id: int, nodes: Sequence[str] = ("node1",)) -> SlurmJob:
        job = self._get(job_id)
        return self._set(
            job,
            state="RUNNING",
            nodes=tuple(nodes),
            batch_host=nodes[0] if nodes else None,
            start_time=datetime.now(UTC),
            end_time=None,
            state_reason=None,
            exit_code=0,
            exit_signal=0,
        )

    def finish(self, job_id: int, state: str = "COMPLETED", *, exit_code: int = 0, exit_signal: int = 0) -> SlurmJob:
        job = self._get(job_id)
        now = datetime.now(UTC)
        job = self._set(job, state=state, end_time=now, exit_code=exit_code, exit_signal=exit_signal)
        self._record(job, state)
        return job

    def remove(self, job_id: int) -> None:
        """Forget the job, as slurmctld does after MinJobAge."""
        self.jobs.pop(job_id, None)

    # ------------------------------------------------------------ Scheduler

    async def list_jobs(self) -> Snapshot:
        self._enter("list_jobs", None)
        return Snapshot(jobs=tuple(self.jobs.values()), taken_at=datetime.now(UTC))

    async def requeue_hold(self, target: JobTarget) -> CommandResult:
        job_id = self._resolve("requeue_hold", target)
        cmd = self._enter("requeue_hold", job_id)
        job = self._get(job_id)
        if not job.requeue:
            raise OperationDisabled("requested operation is presently disabled", command=cmd, returncode=1)
        if job.state == "PENDING":
            raise JobStateConflict("job is pending execution", command=cmd, returncode=1)
        if job.state in _RUNNING_LIKE:
            self._record(job, "REQUEUED")
        self._set(
            job,
            state="PENDING",
            held=True,
            hold_reason="JobHeldUser",
            state_reason="JobHeldUser",
            priority=0,
            restart_count=job.restart_count + 1,
            nodes=(),
            batch_host=None,
            start_time=None,
            end_time=None,
        )
        return self._result(cmd)

    async def set_excluded_nodes(self, target: JobTarget, nodes: Sequence[str]) -> CommandResult:
        job_id = self._resolve("set_excluded_nodes", target)
        cmd = self._enter("set_excluded_nodes", job_id, *nodes)
        job = self._get(job_id)
        if job.state not in {"PENDING", "SPECIAL_EXIT"}:
            raise JobStateConflict("job has already finished", command=cmd, returncode=1)
        self._set(job, excluded_nodes=tuple(nodes))
        return self._result(cmd)

    async def release(self, target: JobTarget) -> CommandResult:
        job_id = self._resolve("release", target)
        cmd = self._enter("release", job_id)
        job = self._get(job_id)
        if job.state not in {"PENDING", "SPECIAL_EXIT"}:
            raise JobStateConflict("job has already finished", command=cmd, returncode=1)
        self._set(job, state="PENDING", held=False, hold_reason=None, state_reason="BeginTime", priority=1)
        return self._result(cmd)

    async def cancel(self, target: JobTarget) -> CommandResult:
        job_id = self._resolve("cancel", target)
        cmd = self._enter("cancel", job_id)
        job = self._get(job_id)
        if job.end_time is None:
            self._set(
                job,
                state="CANCELLED",
                end_time=datetime.now(UTC),
                exit_signal=15 if job.state in _RUNNING_LIKE else 0,
            )
            self._record(self.jobs[job_id], "CANCELLED")
        return self._result(cmd)

    async def job_history(self, job_id: int) -> list[AccountingRecord] | None:
        self._enter("job_history", job_id)
        if not self.accounting:
            return None
        return list(self.history.get(int(job_id), ()))

    async def lookup_job(self, job_id: int) -> JobLookup:
        self._enter("lookup_job", job_id)
        history = await self.job_history(job_id)
        self.calls.pop()  # the nested call is an implementation detail
        return JobLookup(
            job_id=int(job_id), job=self.jobs.get(int(job_id)), history=tuple(history) if history is not None else None
        )

    async def drain_node(self, node: str, reason: str) -> CommandResult:
        self._enter("drain_node", None, node, reason)
        self.drained.add(node)
        return CommandResult(
            ("scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"), 0, "", "", 0.001
        )

    async def node_drained(self, node: str) -> bool:
        self._enter("node_drained", None, node)
        return node in self.drained

    async def partition_nodes(self, partition: str) -> tuple[str, ...] | None:
        self._enter("partition_nodes", None, partition)
        nodes = self.partitions.get(partition)
        return tuple(sorted(nodes)) if nodes else None

    # ------------------------------------------------------------ internals

    def _resolve(self, method: str, target: JobTarget) -> int:
        """The job id a target names: `151_4` is the job holding task 4 of array 151."""
        text = target_text(target)
        self.targets.append((method, text))
        array_id, _, task = text.partition("_")
        if not task:
            return int(array_id)
        for job in self.jobs.values():
            if job.array_job_id == int(array_id) and job.array_task_id == int(task):
                return job.job_id
        raise JobNotFound("invalid job id specified", command=("fake", method, text), returncode=1)

    def _enter(self, method: str, job_id: int | None, *args: str) -> tuple[str, ...]:
        self.calls.append((method, None if job_id is None else int(job_id), tuple(args)))
        pending = self.failures.get(method)
        if pending:
            raise pending.pop(0)
        return ("fake", method, *(() if job_id is None else (str(job_id),)), *args)

    def _get(self, job_id: int) -> SlurmJob:
        job = self.jobs.get(int(job_id))
        if job is None:
            raise JobNotFound("invalid job id specified", command=("fake", str(job_id)), returncode=1)
        return job

    def _set(self, job: SlurmJob, **changes: object) -> SlurmJob:
        job = replace(job, **changes)  # type: ignore[arg-type]
        self.jobs[job.job_id] = job
        return job

    def _record(self, job: SlurmJob, state: str) -> None:
        rows = self.history.setdefault(job.job_id, [])
        rows.append(
            AccountingRecord(
                job_id=job.job_id,
                attempt=len(rows),
                state=state,
                exit_code=job.exit_code,
                exit_signal=job.exit_signal,
                nodes=job.nodes,
                start=job.start_time,
                end=job.end_time or datetime.now(UTC),
                source="fake",
            )
        )

    @staticmethod
    def _result(cmd: tuple[str, ...]) -> CommandResult:
        started = time.monotonic()
        return CommandResult(command=cmd, returncode=0, stdout="", stderr="", duration=time.monotonic() - started)
