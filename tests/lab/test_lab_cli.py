"""`recovery lab`: idempotent start, status report, and stopping only processes that are ours."""

from __future__ import annotations

import io
import re
import subprocess
from pathlib import Path

import pytest

from app.lab.cli import main, run, script_path
from tests.plugins.slurm_lab import SlurmLab


def _pids(lab_dir: Path) -> dict[str, str]:
    return {p.name: p.read_text().strip() for p in sorted((lab_dir / "run").glob("*.pid"))}


def test_script_ships_with_the_package_and_is_valid_bash() -> None:
    path = Path(script_path())
    assert path.is_file() and path.parent == Path(__file__).resolve().parents[2] / "app" / "lab"
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True, check=False).returncode == 0


def test_unknown_action_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown lab action"):
        run("restart")
    with pytest.raises(SystemExit):
        main(["restart"])


@pytest.mark.slurm
def test_up_again_is_a_no_op(slurm_lab: SlurmLab) -> None:
    before = _pids(slurm_lab.lab_dir)
    out = io.StringIO()
    assert run("up", lab_dir=str(slurm_lab.lab_dir), dbd=slurm_lab.accounting, out=out) == 0
    assert f"export SLURM_CONF={slurm_lab.slurm_conf}" in out.getvalue().splitlines()
    assert _pids(slurm_lab.lab_dir) == before, "a second `up` must not restart anything"
    assert {"slurmctld.pid", "slurmd-node1.pid", "slurmd-node2.pid", "slurmd-node3.pid"} <= set(before)
    conf = Path(slurm_lab.slurm_conf).read_text()
    for line in (
        "ClusterName=lab",
        "AuthInfo=cred_expire=5",
        "SchedulerParameters=bf_interval=1,sched_interval=2",
        "JobRequeue=1",
        "MinJobAge=86400",
        "JobCompType=jobcomp/filetxt",
    ):
        assert line in conf.splitlines(), line


@pytest.mark.slurm
def test_status_lists_daemons_pids_and_sinfo(slurm_lab: SlurmLab) -> None:
    out = io.StringIO()
    assert run("status", lab_dir=str(slurm_lab.lab_dir), out=out) == 0
    report = out.getvalue()
    for name, pid in _pids(slurm_lab.lab_dir).items():
        assert re.search(rf"^{re.escape(name[:-4])} running pid {pid}$", report, re.M), (name, report)
    assert "PARTITION" in report and "debug*" in report


def test_down_never_signals_a_process_that_is_not_the_lab_daemon(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    stranger = subprocess.Popen(["sleep", "30"])
    try:
        for name in ("slurmctld.pid", "slurmd-node1.pid", "slurmdbd.pid", "munged.pid"):
            (tmp_path / "run" / name).write_text(f"{stranger.pid}\n")
        out = io.StringIO()
        assert run("down", lab_dir=str(tmp_path), out=out) == 0
        assert stranger.poll() is None, "down killed a process that was not the lab's"
        assert not list((tmp_path / "run").glob("*.pid")), "stale pid files are cleaned up"
        status = io.StringIO()
        assert run("status", lab_dir=str(tmp_path), out=status) == 3
        assert "lab is down" in status.getvalue()
    finally:
        stranger.kill()
        stranger.wait()
