"""`recovery lab`: idempotent start, status report, and stopping only processes that are ours."""

from __future__ import annotations

import io
import json
import re
import subprocess
import urllib.request
from pathlib import Path

import pytest

from app.lab.cli import main, run, script_path
from tests.plugins import require
from tests.plugins.slurm_lab import SlurmLab, host_version, lab_lock, start_lab, versions_under_test


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


CLUSTERS = {"22.05": "lab", "24.11": "lab2411", "26.05": "lab2605"}


@pytest.mark.slurm
@pytest.mark.slurm_versions
def test_up_again_is_a_no_op(slurm_lab: SlurmLab) -> None:
    before = _pids(slurm_lab.lab_dir)
    out = io.StringIO()
    rc = run(
        "up",
        lab_dir=str(slurm_lab.lab_dir),
        dbd=slurm_lab.accounting,
        slurm=slurm_lab.version,
        restd=slurm_lab.restd_url is not None,
        port_offset=slurm_lab.port_offset,
        out=out,
    )
    assert rc == 0
    exports = out.getvalue().splitlines()
    assert f"export SLURM_CONF={slurm_lab.slurm_conf}" in exports
    assert f"export RECOVERY_SLURM_BIN_DIR={slurm_lab.bin_dir}" in exports
    assert _pids(slurm_lab.lab_dir) == before, "a second `up` must not restart anything"
    assert {"slurmctld.pid", "slurmd-node1.pid", "slurmd-node2.pid", "slurmd-node3.pid"} <= set(before)
    conf = Path(slurm_lab.slurm_conf).read_text()
    for line in (
        f"ClusterName={CLUSTERS[slurm_lab.release]}",
        "SchedulerParameters=bf_interval=1,sched_interval=2",
        "JobRequeue=1",
        "MinJobAge=86400",
        "JobCompType=jobcomp/filetxt",
    ):
        assert line in conf.splitlines(), line
    assert re.search(r"^AuthInfo=cred_expire=5(,socket=\S+)?$", conf, re.M)
    # the wrappers run this release's own commands, wherever they are called from
    for tool in ("squeue", "scontrol", "sacct", "sinfo", "sbatch", "scancel", "srun"):
        assert (slurm_lab.bin_dir / tool).stat().st_mode & 0o111, tool
    version = subprocess.run(
        [str(slurm_lab.bin_dir / "sinfo"), "-V"], capture_output=True, text=True, check=True, cwd="/"
    ).stdout
    assert version.startswith(f"slurm-wlm {slurm_lab.release}."), version
    if slurm_lab.restd_url:  # slurmrestd answers with the token the lab printed
        request = urllib.request.Request(
            f"{slurm_lab.restd_url}/openapi/v3",
            headers={"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": slurm_lab.jwt or ""},
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            spec = json.loads(answer.read())
        assert any(path.startswith("/slurm/v0.0.") for path in spec["paths"])


@pytest.mark.slurm
@pytest.mark.slurm_versions
def test_status_says_which_release_runs_and_lists_daemons(slurm_lab: SlurmLab) -> None:
    out = io.StringIO()
    assert run("status", lab_dir=str(slurm_lab.lab_dir), out=out) == 0
    report = out.getvalue()
    for name, pid in _pids(slurm_lab.lab_dir).items():
        assert re.search(rf"^{re.escape(name[:-4])} running pid {pid}$", report, re.M), (name, report)
    assert re.search(rf"^slurm: .*slurm-wlm {re.escape(slurm_lab.release)}\.", report, re.M), report
    assert "PARTITION" in report and "debug*" in report
    # the timings the running slurmctld has (the shared labs run fast); every 26.05 lab offers expedited requeue
    delay = "requeue_delay 5 s" if slurm_lab.release == "26.05" else "no requeue_delay before 25.11"
    assert re.search(rf"^timings: fast \(cred_expire 5 s, {delay}, SchedulerParameters=bf_interval=1,", report, re.M)
    assert ("SlurmctldParameters=enable_expedited_requeue" in report) == (slurm_lab.release == "26.05"), report


@pytest.mark.slurm
@pytest.mark.slurm_versions
def test_default_timings_are_slurms_own(slurm_lab: SlurmLab) -> None:
    lab_dir = f"{slurm_lab.lab_dir}-timings"
    offset = (slurm_lab.port_offset or 0) + 80
    with lab_lock():
        try:
            out = io.StringIO()
            assert run("up", lab_dir=lab_dir, slurm=slurm_lab.version, nodes=1, port_offset=offset, timings="default",
                       out=out) == 0  # fmt: skip
            conf = Path(f"{lab_dir}/etc/slurm.conf").read_text()
            report = io.StringIO()
            assert run("status", lab_dir=lab_dir, out=report) == 0
        finally:
            run("down", lab_dir=lab_dir, out=io.StringIO())
    assert re.search(r"^AuthInfo=cred_expire=120(,socket=\S+)?$", conf, re.M), conf
    newer = slurm_lab.release == "26.05"  # 25.11+: requeue_delay (else cred_expire) and expedited requeue
    scheduler = "bf_interval=30,sched_interval=60" + (",requeue_delay=120" if newer else "")
    assert f"SchedulerParameters={scheduler}" in conf.splitlines()
    assert ("SlurmctldParameters=enable_expedited_requeue" in conf.splitlines()) == newer
    assert re.search(r"^timings: default \(cred_expire 120 s, ", report.getvalue(), re.M), report.getvalue()
    with pytest.raises(ValueError, match="unknown lab timings"):
        run("up", lab_dir=lab_dir, timings="slow")


@pytest.mark.slurm
@pytest.mark.slurm_several_versions
def test_labs_of_every_release_run_at_once_as_separate_clusters() -> None:
    labs = []
    for version in versions_under_test():
        try:
            labs.append(start_lab(version))
        except RuntimeError as exc:
            require(f"the Slurm {version} lab", str(exc))
    if len(labs) < 2:
        require("two Slurm releases", f"RECOVERY_TEST_SLURM_VERSIONS names only {versions_under_test()}")
    seen = {}
    for lab in labs:  # every one answers now, on its own ports, as its own cluster
        info = subprocess.run(
            [str(lab.bin_dir / "scontrol"), "show", "config"], capture_output=True, text=True, check=True, timeout=30
        ).stdout
        fields = dict(re.findall(r"^(\w+)\s+= (.*)$", info, re.M))
        seen[lab.release] = (fields["ClusterName"], fields["SlurmctldPort"], fields["SLURM_VERSION"])
    assert len({cluster for cluster, _, _ in seen.values()}) == len(labs)
    assert len({port for _, port, _ in seen.values()}) == len(labs)
    for release, (_, _, version) in seen.items():
        assert version.startswith(release), (release, version)


@pytest.mark.slurm
@pytest.mark.slurm_several_versions
def test_down_of_a_root_lab_stops_its_daemons_and_unmounts_only_its_own_view() -> None:
    newer = [v for v in versions_under_test() if v != host_version()]
    if not newer:
        require(
            "a Slurm release other than the host's", f"RECOVERY_TEST_SLURM_VERSIONS names only {versions_under_test()}"
        )
    version = newer[0]
    shared = start_lab(version)  # the shared lab of that release keeps running throughout
    lab_dir = f"{shared.lab_dir}-downtest"
    offset = (shared.port_offset or 0) + 70
    with lab_lock():  # no other test process starts a lab in the same root meanwhile
        out = io.StringIO()
        assert run("up", lab_dir=lab_dir, slurm=version, nodes=1, port_offset=offset, out=out) == 0
        pids = {name: int(pid) for name, pid in _pids(Path(lab_dir)).items()}
        assert {"munged.pid", "slurmctld.pid", "slurmd-node1.pid"} <= set(pids)
        root = next(
            line.split()[-1]
            for line in Path(f"{lab_dir}/etc/slurm.conf").read_text().splitlines()
            if line.startswith("# Slurm ")
        )
        mounts = Path("/proc/self/mounts").read_text()
        assert f" {root}{lab_dir} " in mounts and f" {root}{shared.lab_dir} " in mounts
        assert run("down", lab_dir=lab_dir, out=io.StringIO()) == 0
    assert all(not Path(f"/proc/{pid}").exists() for pid in pids.values()), pids
    mounts = Path("/proc/self/mounts").read_text()
    assert f" {root}{lab_dir} " not in mounts, "down unmounts its own view of the lab dir"
    assert f" {root}{shared.lab_dir} " in mounts and f" {root}/proc " in mounts, "and nothing another lab uses"
    assert (
        shared.state(0) == ""
        and _pids(shared.lab_dir)
        and run("status", lab_dir=str(shared.lab_dir), out=io.StringIO()) == 0
    )


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
