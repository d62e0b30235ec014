"""CliScheduler against the REAL Slurm lab (marker `slurm`), plus its timeout and error handling."""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

import pytest

from app.slurm.adapter import Scheduler
from app.slurm.cli_scheduler import CliScheduler
from app.slurm.errors import (
    JobNotFound,
    JobStateConflict,
    OperationDisabled,
    SchedulerError,
    TransientSchedulerError,
)
from tests.plugins.slurm_lab import SlurmLab

COMMENT = {"APS": {"workflow_id": "wf 1", "environment": "lab", "mode": "act", "note": "pipes | and spaces"}}

# fails on its first attempt only, then runs long enough to be observed (and cancelled)
FAIL_ONCE = """#!/bin/bash
#SBATCH --job-name=failonce
#SBATCH --requeue
#SBATCH --output=out-%x-%j.log
#SBATCH --open-mode=append
echo "attempt ${SLURM_RESTART_COUNT:-0} on $SLURMD_NODENAME"
if [ -z "$SLURM_RESTART_COUNT" ]; then exit 1; fi
sleep 60
"""

SLEEPER = """#!/bin/bash
#SBATCH --job-name=sleeper
#SBATCH --output=out-%x-%j.log
echo "started on $SLURMD_NODENAME"
sleep "${SLEEP:-60}"
"""


@pytest.fixture
def scheduler(slurm_lab: SlurmLab) -> CliScheduler:
    # through the lab's wrappers, as RECOVERY_SLURM_BIN_DIR would: each release's own commands
    return CliScheduler(timeout=15, bin_dir=str(slurm_lab.bin_dir), env=slurm_lab.env())


def test_cli_scheduler_implements_the_interface() -> None:
    assert isinstance(CliScheduler(timeout=1), Scheduler)


# ---------------------------------------------------------------- real lab


@pytest.mark.slurm
@pytest.mark.slurm_versions
async def test_list_jobs_sees_a_submitted_job_with_its_comment(slurm_lab: SlurmLab, scheduler: CliScheduler) -> None:
    job_id = slurm_lab.submit(SLEEPER, sbatch_args=["--requeue", f"--comment={json.dumps(COMMENT)}"], SLEEP="30")
    slurm_lab.wait_state(job_id, "RUNNING")
    snapshot = await scheduler.list_jobs()
    job = snapshot.get(job_id)
    assert job is not None, f"job {job_id} missing from {len(snapshot.jobs)} jobs"
    assert json.loads(job.comment) == COMMENT
    assert job.state == "RUNNING" and job.requeue and not job.held and job.restart_count == 0
    assert job.nodes and job.nodes[0] in {"node1", "node2", "node3"} and job.batch_host == job.nodes[0]
    assert job.stdout == str(slurm_lab.test_dir() / f"out-sleeper-{job_id}.log")
    # slurmstepd creates the file a moment after squeue shows RUNNING (24.11 lets that moment show)
    deadline = time.monotonic() + 30
    while not Path(job.stdout).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert Path(job.stdout).exists()
    assert job.start_time is not None and job.end_time is None and job.cluster == slurm_lab.cluster
    assert snapshot.problems == () and snapshot.duration > 0
    assert snapshot.slurm_release and snapshot.slurm_release.startswith(slurm_lab.release)
    await scheduler.cancel(job_id)
    slurm_lab.wait_state(job_id, "CANCELLED")


@pytest.mark.slurm
@pytest.mark.slurm_versions
async def test_failed_job_is_requeued_held_excluded_and_released(slurm_lab: SlurmLab, scheduler: CliScheduler) -> None:
    job_id = slurm_lab.submit(FAIL_ONCE)
    slurm_lab.wait_state(job_id, "FAILED")
    failed = (await scheduler.list_jobs()).get(job_id)
    assert failed is not None and (failed.state, failed.exit_code, failed.exit_signal) == ("FAILED", 1, 0)
    first_node = failed.nodes[0]

    result = await scheduler.requeue_hold(job_id)
    assert result.returncode == 0 and result.duration > 0 and result.command[-2:] == ("requeuehold", str(job_id))
    held = (await scheduler.list_jobs()).get(job_id)
    assert held is not None and held.state == "PENDING" and held.held and held.restart_count == 1
    assert held.hold_reason == "JobHeldUser"

    await scheduler.set_excluded_nodes(job_id, [first_node])
    excluded = (await scheduler.list_jobs()).get(job_id)
    assert excluded is not None and excluded.excluded_nodes == (first_node,)
    assert slurm_lab.scontrol_show(job_id)["ExcNodeList"] == first_node

    await scheduler.release(job_id)
    slurm_lab.wait_state(job_id, "RUNNING", timeout=40)  # cred_expire=5 delays the restart
    rerun = (await scheduler.list_jobs()).get(job_id)
    assert rerun is not None and not rerun.held and rerun.restart_count == 1
    assert rerun.nodes and first_node not in rerun.nodes

    await scheduler.cancel(job_id)
    slurm_lab.wait_state(job_id, "CANCELLED")
    ended = (await scheduler.list_jobs()).get(job_id)
    assert ended is not None
    assert ended.state == "CANCELLED" and ended.end_time is not None

    history = await scheduler.job_history(job_id)
    assert history is not None, "the lab keeps jobcomp (or slurmdbd) accounting"
    assert [r.attempt for r in history] == list(range(len(history))) and len(history) >= 2
    assert (history[0].state in {"FAILED", "REQUEUED"}) and history[0].exit_code == 1
    assert history[0].nodes == (first_node,)
    assert history[-1].state == "CANCELLED" and history[-1].nodes == rerun.nodes
    # slurmdbd (`sacct -D`) names the requeued attempt REQUEUED; jobcomp keeps its FAILED line
    assert history[0].source == ("sacct" if slurm_lab.accounting else "jobcomp")


@pytest.mark.slurm
@pytest.mark.slurm_versions
async def test_set_excluded_nodes_with_empty_list_clears(slurm_lab: SlurmLab, scheduler: CliScheduler) -> None:
    job_id = slurm_lab.submit(SLEEPER, sbatch_args=["--hold"])
    await scheduler.set_excluded_nodes(job_id, ["node1", "node3"])
    excluded = (await scheduler.list_jobs()).get(job_id)
    assert excluded is not None and excluded.excluded_nodes == ("node1", "node3")
    await scheduler.set_excluded_nodes(job_id, [])
    cleared = (await scheduler.list_jobs()).get(job_id)
    assert cleared is not None and cleared.excluded_nodes == ()
    await scheduler.cancel(job_id)


@pytest.mark.slurm
@pytest.mark.slurm_versions
async def test_requeue_of_a_no_requeue_job_is_operation_disabled(slurm_lab: SlurmLab, scheduler: CliScheduler) -> None:
    job_id = slurm_lab.submit(SLEEPER, sbatch_args=["--no-requeue"], SLEEP="30")
    slurm_lab.wait_state(job_id, "RUNNING")
    with pytest.raises(OperationDisabled) as caught:
        await scheduler.requeue_hold(job_id)
    assert caught.value.returncode == 1 and "presently disabled" in caught.value.stderr
    assert str(job_id) in str(caught.value)
    assert slurm_lab.state(job_id) == "RUNNING"
    await scheduler.cancel(job_id)
    slurm_lab.wait_state(job_id, "CANCELLED")


@pytest.mark.slurm
@pytest.mark.slurm_versions
async def test_unknown_job_raises_job_not_found(slurm_lab: SlurmLab, scheduler: CliScheduler) -> None:
    unknown = 99_999_999
    for action in (scheduler.requeue_hold, scheduler.release, scheduler.cancel):
        with pytest.raises(JobNotFound) as caught:
            await action(unknown)
        assert "invalid job id" in caught.value.stderr.lower()
    with pytest.raises(JobNotFound):
        await scheduler.set_excluded_nodes(unknown, ["node1"])
    lookup = await scheduler.lookup_job(unknown)
    assert not lookup.found and lookup.job is None and lookup.history == ()


@pytest.mark.slurm
@pytest.mark.slurm_versions
async def test_actions_on_a_finished_job(slurm_lab: SlurmLab, scheduler: CliScheduler) -> None:
    job_id = slurm_lab.submit(SLEEPER, SLEEP="0")
    slurm_lab.wait_state(job_id, "COMPLETED")
    await scheduler.cancel(job_id)  # already ended: not an error
    with pytest.raises(JobStateConflict):
        await scheduler.release(job_id)
    lookup = await scheduler.lookup_job(job_id)
    assert lookup.job is not None
    assert lookup.found and lookup.job.state == "COMPLETED" and lookup.job.exit_code == 0
    assert lookup.last_record is not None and lookup.last_record.state == "COMPLETED"


@pytest.mark.slurm
@pytest.mark.slurm_versions
async def test_partition_nodes_of_the_lab(slurm_lab: SlurmLab, scheduler: CliScheduler) -> None:
    assert await scheduler.partition_nodes("debug") == ("node1", "node2", "node3")
    assert await scheduler.partition_nodes("no-such-partition") is None


# ---------------------------------------------------------------- timeouts and failures (fake binaries)


def _fake_tool(directory: Path, name: str, body: str) -> None:
    path = directory / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


async def test_hanging_command_is_killed_and_transient(tmp_path: Path) -> None:
    marker = tmp_path / "child.pid"
    _fake_tool(tmp_path, "squeue", f"sleep 30 & echo $! > {marker}; wait")
    scheduler = CliScheduler(bin_dir=str(tmp_path), timeout=0.5)
    started = time.monotonic()
    with pytest.raises(TransientSchedulerError) as caught:
        await scheduler.list_jobs()
    elapsed = time.monotonic() - started
    assert elapsed < 20, f"took {elapsed:.1f}s: the 30 s command was not killed at its 0.5 s timeout"
    assert "timed out" in str(caught.value) and str(tmp_path / "squeue") in caught.value.command
    child = int(marker.read_text())
    assert _gone_or_zombie(child, within=2.0), "the command's child outlived the timeout"


def _gone_or_zombie(pid: int, *, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if "zombie" in Path(f"/proc/{pid}/status").read_text().lower():
                return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize(
    ("stderr", "expected"),
    [
        ("slurm_load_jobs error: Unable to contact slurm controller (connect failure)", TransientSchedulerError),
        ("slurm_load_jobs error: Socket timed out on send/recv operation", TransientSchedulerError),
        ("something nobody has seen before", TransientSchedulerError),
        ("slurm_load_jobs error: Invalid job id specified", JobNotFound),
        ("Requested operation is presently disabled for job 5", OperationDisabled),
    ],
)
async def test_failures_are_classified(tmp_path: Path, stderr: str, expected: type[SchedulerError]) -> None:
    _fake_tool(tmp_path, "scontrol", f"echo '{stderr}' >&2; exit 1")
    with pytest.raises(expected) as caught:
        await CliScheduler(bin_dir=str(tmp_path), timeout=5).release(5)
    assert type(caught.value) is expected
    assert caught.value.returncode == 1 and stderr in caught.value.stderr and stderr in str(caught.value)
    assert caught.value.command == (str(tmp_path / "scontrol"), "release", "5")


async def test_garbage_from_squeue_is_transient(tmp_path: Path) -> None:
    _fake_tool(tmp_path, "squeue", "echo 'this is not json'")
    with pytest.raises(TransientSchedulerError, match="unreadable"):
        await CliScheduler(bin_dir=str(tmp_path), timeout=5).list_jobs()


async def test_missing_binary_is_a_scheduler_error(tmp_path: Path) -> None:
    with pytest.raises(SchedulerError, match="cannot start squeue"):
        await CliScheduler(bin_dir=str(tmp_path), timeout=5).list_jobs()


async def test_job_history_without_any_accounting_is_none(tmp_path: Path) -> None:
    _fake_tool(
        tmp_path,
        "sacct",
        "case \"$*\" in *-c*) echo 'Slurm job completion is disabled' >&2; exit 1;; esac; echo "
        "'Slurm accounting storage is disabled' >&2; exit 1",
    )
    assert await CliScheduler(bin_dir=str(tmp_path), timeout=5).job_history(7) is None


async def test_partition_nodes_fall_back_to_plain_sinfo_without_json(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    _fake_tool(
        tmp_path,
        "sinfo",
        f'echo "$*" >> {calls}; case "$*" in *--json*) echo "sinfo: unrecognized option \'--json\'" '
        f">&2; exit 1;; esac; printf 'gpu2\\ngpu1\\n'",
    )
    assert await CliScheduler(bin_dir=str(tmp_path), timeout=5).partition_nodes("gpu") == ("gpu1", "gpu2")
    assert calls.read_text().splitlines() == ["--json", "-h -a -N -p gpu -o %N"]


async def test_partition_nodes_fall_back_when_the_json_shape_is_unknown(tmp_path: Path) -> None:
    _fake_tool(tmp_path, "sinfo", 'case "$*" in *--json*) echo \'{"sinfo": []}\';; *) echo gpu1;; esac')
    assert await CliScheduler(bin_dir=str(tmp_path), timeout=5).partition_nodes("gpu") == ("gpu1",)


async def test_partition_nodes_unreachable_controller_is_transient(tmp_path: Path) -> None:
    _fake_tool(
        tmp_path,
        "sinfo",
        "echo 'slurm_load_partitions: Unable to contact slurm controller (connect failure)' >&2; exit 1",
    )
    with pytest.raises(TransientSchedulerError):
        await CliScheduler(bin_dir=str(tmp_path), timeout=5).partition_nodes("debug")
