"""The Slurm implementation of Scheduler: squeue/scontrol/scancel/sacct/sinfo as asyncio subprocesses."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from app.infra import metrics
from app.infra.config import Settings
from app.slurm.adapter import JobLookup, JobTarget, node_text, target_text
from app.slurm.errors import JobNotFound, SchedulerError, TransientSchedulerError, classify
from app.slurm.incremental import SnapshotParser
from app.slurm.parse import (
    ParseError,
    parse_partition_nodes,
    parse_sacct_pipe,
    parse_sinfo_node_names,
    parse_snapshot,
)
from app.slurm.records import AccountingRecord, CommandResult, Snapshot

# sacct columns for attempt history; Comment last because it may contain the `|` separator
SACCT_COLUMNS = "JobIDRaw,JobID,State,ExitCode,NodeList,Start,End,Reason,Submit,Comment"
# jobcomp/filetxt (`sacct -c`) keeps no Reason or Comment
JOBCOMP_COLUMNS = "JobIDRaw,JobID,State,ExitCode,NodeList,Start,End,Submit"
_ACCOUNTING_DISABLED = ("accounting storage is disabled", "slurm not configured with slurmdbd")
_JOBCOMP_DISABLED = ("job completion is disabled", "jobcomp/none", "no job completion")
# what an sinfo without --json (before 21.08) prints
_NO_JSON_OPTION = ("unrecognized option", "invalid option")


class CliScheduler:
    """Runs Slurm's commands (argv lists, never a shell), each bounded by settings.slurm_command_timeout."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        bin_dir: str | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        settings = settings or Settings.from_env()
        self.bin_dir = bin_dir if bin_dir is not None else settings.slurm_bin_dir
        self.timeout = timeout if timeout is not None else settings.slurm_command_timeout
        if env is None and settings.slurm_conf:
            env = {**os.environ, "SLURM_CONF": settings.slurm_conf}  # this cluster's slurm.conf
        self.env = dict(env) if env is not None else None  # None: inherit os.environ at call time
        self.snapshots = SnapshotParser()  # list_jobs decodes only the job records that changed
        self.last_result: CommandResult | None = None

    # ------------------------------------------------------------ plumbing

    def binary(self, tool: str) -> str:
        """Absolute path of a Slurm tool: from slurm_bin_dir when set, else from PATH (the given env's, if any)."""
        if self.bin_dir:
            return os.path.join(self.bin_dir, tool)
        path = self.env.get("PATH") if self.env is not None else None
        return shutil.which(tool, path=path) or tool

    async def run(self, tool: str, *args: str, check: bool = True) -> CommandResult:
        """Run one command with a timeout; on failure raise the classified SchedulerError."""
        with metrics.scheduler_command(_command_label(tool, args)):
            return await self._run(tool, *args, check=check)

    async def _run(self, tool: str, *args: str, check: bool = True) -> CommandResult:
        argv = (self.binary(tool), *args)
        started = time.monotonic()
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self.env,
                start_new_session=True,  # its own process group, so a timeout kills its children too
            )
        except OSError as exc:
            raise SchedulerError(
                f"cannot start {tool}: {exc}", command=argv, duration=time.monotonic() - started
            ) from None
        try:
            stdout, stderr = await asyncio.wait_for(proc.communicate(), self.timeout)
        except TimeoutError:
            _kill_group(proc)
            await proc.communicate()
            raise TransientSchedulerError(
                f"timed out after {self.timeout:g}s",
                command=argv,
                returncode=proc.returncode,
                duration=time.monotonic() - started,
            ) from None
        except BaseException:  # cancelled: do not leave the command running
            _kill_group(proc)
            await proc.communicate()
            raise
        result = CommandResult(
            command=argv,
            returncode=proc.returncode if proc.returncode is not None else -1,
            stdout=stdout.decode("utf-8", "replace"),
            stderr=stderr.decode("utf-8", "replace"),
            duration=time.monotonic() - started,
        )
        self.last_result = result
        if check and result.returncode != 0:
            raise classify(argv, result.returncode, result.stderr or result.stdout, duration=result.duration)
        return result

    # ------------------------------------------------------------ Scheduler

    async def list_jobs(self) -> Snapshot:
        """All jobs in slurmctld's memory, finished ones included, from one `squeue --json --states=all`."""
        taken_at = datetime.now(UTC)
        # 22.05 ignores filters and always lists every job; 23.02+ apply squeue's default filter
        # (pending, running, completing) to --json as well, so without --states=all a FAILED job
        # would vanish from the answer the moment it ends
        result = await self.run("squeue", "--json", "--states=all")
        try:
            return self.snapshots.parse(result.stdout, taken_at=taken_at, duration=result.duration)
        except ParseError as exc:
            raise TransientSchedulerError(
                f"unreadable squeue --json output: {exc}",
                command=result.command,
                returncode=result.returncode,
                stderr=result.stderr,
                duration=result.duration,
            ) from None

    # An array task is named `<array id>_<task id>` (see app.slurm.adapter.JobTarget): the bare id of
    # an array's last task would make scontrol/scancel act on every task of the array.

    async def requeue_hold(self, job: JobTarget) -> CommandResult:
        return await self.run("scontrol", "requeuehold", target_text(job))

    async def set_excluded_nodes(self, job: JobTarget, nodes: Sequence[str]) -> CommandResult:
        return await self.run("scontrol", "update", f"JobId={target_text(job)}", f"ExcNodeList={','.join(nodes)}")

    async def release(self, job: JobTarget) -> CommandResult:
        return await self.run("scontrol", "release", target_text(job))

    async def cancel(self, job: JobTarget) -> CommandResult:
        # scancel exits 0 even for an unknown job; only --verbose says why, on stderr
        result = await self.run("scancel", "--verbose", target_text(job))
        errors = [line for line in result.stderr.splitlines() if "error:" in line]
        if errors and not any("already completing or completed" in line for line in errors):
            raise classify(result.command, result.returncode, "\n".join(errors), duration=result.duration)
        return result

    async def drain_node(self, node: str, reason: str) -> CommandResult:
        """Drain one node: its running jobs go on, no new job starts there (`scontrol update ... State=DRAIN`)."""
        return await self.run("scontrol", "update", f"NodeName={node_text(node)}", "State=DRAIN", f"Reason={reason}")

    async def node_drained(self, node: str) -> bool:
        """Whether Slurm shows the node drained or draining (`sinfo -h -N -n NODE -o %T`: one state word per line)."""
        result = await self.run("sinfo", "-h", "-N", "-n", node_text(node), "-o", "%T")
        words = [line.strip().lower() for line in result.stdout.splitlines() if line.strip()]
        return bool(words) and all("drain" in word for word in words)

    async def job_history(self, job_id: int) -> list[AccountingRecord] | None:
        job_id = int(job_id)
        result = await self.run("sacct", "-D", "-X", "-P", "-j", str(job_id), "-o", SACCT_COLUMNS, check=False)
        if result.returncode == 0 and not _mentions(result, _ACCOUNTING_DISABLED):
            return _only(parse_sacct_pipe(result.stdout, source="sacct"), job_id)
        if not _mentions(result, _ACCOUNTING_DISABLED):
            raise classify(result.command, result.returncode, result.stderr or result.stdout, duration=result.duration)
        # no slurmdbd: jobcomp/filetxt still has one line per attempt
        result = await self.run("sacct", "-c", "-P", "-j", str(job_id), "-o", JOBCOMP_COLUMNS, check=False)
        if _mentions(result, _JOBCOMP_DISABLED):
            return None
        if result.returncode != 0:
            raise classify(result.command, result.returncode, result.stderr or result.stdout, duration=result.duration)
        return _only(parse_sacct_pipe(result.stdout, source="jobcomp"), job_id)

    async def lookup_job(self, job_id: int) -> JobLookup:
        job_id = int(job_id)
        job = None
        try:
            # 22.05 ignores -j and lists everything; newer versions filter (and hide ended jobs
            # without --states=all); either way pick ours
            result = await self.run("squeue", "--json", "--states=all", "-j", str(job_id))
            job = parse_snapshot(result.stdout).get(job_id)
        except JobNotFound:
            job = None
        except ParseError as exc:
            raise TransientSchedulerError(f"unreadable squeue --json output: {exc}") from None
        history = await self.job_history(job_id)
        return JobLookup(job_id=job_id, job=job, history=tuple(history) if history is not None else None)

    async def partition_nodes(self, partition: str) -> tuple[str, ...] | None:
        """Nodes of one partition from `sinfo --json` (22.05 lists every node with its partitions and ignores -p)."""
        result = await self.run("sinfo", "--json", check=False)
        if result.returncode != 0 and not _mentions(result, _NO_JSON_OPTION):
            raise classify(result.command, result.returncode, result.stderr or result.stdout, duration=result.duration)
        if result.returncode == 0:
            try:
                return parse_partition_nodes(result.stdout, partition)
            except ParseError:
                pass  # a JSON shape we do not know (later releases group by partition): ask plainly instead
        # The one plain-output read: with -N each line is one node name, which cannot be misread.
        # -a includes hidden partitions, which -p alone would not show.
        result = await self.run("sinfo", "-h", "-a", "-N", "-p", partition, "-o", "%N", check=False)
        if result.returncode != 0 and _mentions(result, ("conflicting options",)):
            # 24.11+ refuse -a together with -p ("Conflicting options, -a and -p"); a named partition shows anyway
            result = await self.run("sinfo", "-h", "-N", "-p", partition, "-o", "%N", check=False)
        if result.returncode != 0:
            raise classify(result.command, result.returncode, result.stderr or result.stdout, duration=result.duration)
        return parse_sinfo_node_names(result.stdout)


def _command_label(tool: str, args: Sequence[str]) -> str:
    """A bounded label: the tool, and for scontrol its verb (`scontrol requeuehold`)."""
    if tool == "scontrol":
        verb = next((a for a in args if not a.startswith("-")), "")
        return f"scontrol {verb}" if verb.isalpha() else tool
    return tool


def _mentions(result: CommandResult, needles: Sequence[str]) -> bool:
    text = (result.stderr + result.stdout).lower()
    return any(needle in text for needle in needles)


def _only(records: list[AccountingRecord], job_id: int) -> list[AccountingRecord]:
    return [record for record in records if record.job_id == job_id]


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            proc.kill()
        except ProcessLookupError:
            pass
