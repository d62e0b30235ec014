"""The `slurmrestd` fixture: a real slurmrestd with JWT (TCP on a free loopback port) and local auth (unix socket).

JWT needs `AuthAltTypes=auth/jwt` in the slurm.conf of slurmctld. Changing the shared default lab's
slurm.conf would make every `recovery lab up` from a worktree without that change restart its
slurmctld (and kill the jobs of other tests), so this plugin runs a small TWIN of the lab instead:
the default lab's generated slurm.conf with its own cluster name (`restlab`), free ports, its own
state/spool/log directories under RECOVERY_RESTLAB_DIR (default: beside the lab's own dir, `<lab dir>-restlab`,
so that sessions with their own RECOVERY_LAB_DIR never share a twin: a twin's start cancels every job of its
user and its session's end stops its daemons: the likely cause of a concurrent run's two-cluster failure), two nodes
(node8, node9) and the JWT lines; munged is the lab's. Daemons are started once per session
and stopped at its end by the pids in their pid files (checked against /proc/PID/exe), never by
name. The twin doubles as a second live cluster (tests of several clusters in one installation).

Needs Debian's `slurmrestd` and `slurm-wlm-jwt-plugin` (.ci/bootstrap installs them); without
them, or without the lab, the fixture fails under CI=true and skips elsewhere.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.infra.config import Settings
from app.slurm.cli_scheduler import CliScheduler
from app.slurm.rest_scheduler import RestScheduler
from tests.plugins import require
from tests.plugins.slurm_lab import SlurmLab, _start, host_version, lab_lock

CLUSTER = "restlab"
# auth/jwt refuses tokens for root and SlurmUser ("Rejecting thread config token"), and without
# slurmdbd there is no AdminLevel, so the REST tests' jobs belong to this user and so do the tokens
USER = "nobody"
AS_USER = ("--uid=65534", "--gid=65534")
# named like the lab's (tests match "on node"), beyond the 3 the lab runs by default
NODES = ("node8", "node9")
_JWT_PLUGIN_GLOB = "/usr/lib/*/slurm-wlm/auth_jwt.so"


class TwinLab(SlurmLab):
    """The SlurmLab handle of the twin: jobs are USER's (their directories writable by USER), and a worker
    on it talks to slurmrestd (`scheduler`), so the lab tests can run unchanged through the REST adapter."""

    rest: RestLab | None = None

    def test_dir(self) -> Path:
        path = super().test_dir()
        path.chmod(0o1777)
        return path

    def submit(self, script_text: str, *, sbatch_args: Sequence[str] = (), **env: str) -> int:
        extra = [arg for arg in AS_USER if arg not in sbatch_args]
        return super().submit(script_text, sbatch_args=[*extra, *sbatch_args], **env)

    def scheduler(self, settings: Settings) -> RestScheduler:
        """The slurmrestd adapter (signed JWT) with its scontrol fallback pointed at the twin."""
        assert self.rest is not None
        settings = dataclasses.replace(
            settings,
            slurm_api="rest",
            slurmrestd_url=self.rest.url,
            slurmrestd_jwt_key=self.rest.jwt_key,
            slurmrestd_user=self.rest.user,
        )
        return RestScheduler(settings, fallback=CliScheduler(settings, env=self.env()))


@dataclass
class RestLab:
    """The twin cluster: its SlurmLab handle (submit, scontrol_show), slurmrestd's addresses and the JWT key."""

    slurm: SlurmLab
    cluster: str
    url: str  # http://127.0.0.1:PORT (rest_auth/jwt)
    socket_url: str  # unix:/path (rest_auth/local)
    jwt_key: str
    directory: Path
    user: str = USER
    as_user: tuple[str, ...] = AS_USER
    release: str = "22.05"
    nodes: tuple[str, ...] = NODES

    @property
    def api_version(self) -> str:
        """The job API the adapter must pick on this release (the newest it offers)."""
        return API_VERSIONS[self.release]

    @property
    def is_twin(self) -> bool:
        return isinstance(self.slurm, TwinLab)


# the newest job API each release's slurmrestd offers (what the adapter must choose)
API_VERSIONS = {"22.05": "v0.0.38", "24.11": "v0.0.42", "26.05": "v0.0.45"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pid_alive(pid_file: Path, program: str) -> int | None:
    try:
        pid = int(pid_file.read_text().strip())
        exe = os.readlink(f"/proc/{pid}/exe")
    except (OSError, ValueError):
        return None
    return pid if os.path.basename(exe).startswith(program) else None


def _twin_conf(lab_conf: str, directory: Path, ctld_port: int, slurmd_port: int, node_ports: list[int]) -> str:
    """The lab's slurm.conf with the twin's name, ports, paths, nodes and JWT."""
    lines = []
    for line in Path(lab_conf).read_text().splitlines():
        key = line.split("=", 1)[0]
        if key in {"NodeName", "PartitionName"} or line.startswith("# generated"):
            continue
        lines.append(line)
    text = "\n".join(lines)
    lab_dir = str(Path(lab_conf).parent.parent)
    text = text.replace(lab_dir, str(directory))
    text = re.sub(r"^ClusterName=.*$", f"ClusterName={CLUSTER}", text, flags=re.M)
    text = re.sub(r"^SlurmctldPort=.*$", f"SlurmctldPort={ctld_port}", text, flags=re.M)
    text = re.sub(r"^SlurmdPort=.*$", f"SlurmdPort={slurmd_port}", text, flags=re.M)
    nodes = "\n".join(
        f"NodeName={name} NodeHostname={name} NodeAddr=127.0.0.1 Port={port} CPUs=2 State=UNKNOWN"
        for name, port in zip(NODES, node_ports, strict=True)
    )
    return (
        "# the slurmrestd twin of the recovery lab (tests/plugins/slurmrestd.py)\n"
        + text
        + f"\nAuthAltTypes=auth/jwt\nAuthAltParameters=jwt_key={directory}/etc/jwt_hs256.key\n"
        + nodes
        + "\nPartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n"
    )


def _wait(what: str, probe, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():
            return
        time.sleep(0.2)
    raise RuntimeError(f"slurmrestd twin: timed out waiting for {what}")


class _Twin:
    def __init__(self, lab: SlurmLab) -> None:
        self.lab = lab
        self.dir = Path(os.environ.get("RECOVERY_RESTLAB_DIR") or f"{lab.lab_dir}-restlab")
        self.conf = self.dir / "etc" / "slurm.conf"
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))
        self.pids: list[tuple[Path, str]] = []
        self.children: list[subprocess.Popen[bytes]] = []  # kept so they are reaped, never left as zombies

    def run(self, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, env=env or self.env, capture_output=True, text=True, timeout=30, check=False)

    def start(self) -> RestLab:
        for sub in ("etc", "state", "spool", "run", "log", "tests"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        (self.dir / "run").chmod(0o1777)  # slurmrestd's unix socket is created after it drops to nobody
        self._write_wrappers()
        key = self.dir / "etc" / "jwt_hs256.key"
        if not key.exists():
            key.write_bytes(secrets.token_bytes(48))
        key.chmod(0o600)
        if not self.conf.exists() or f"NodeName={NODES[0]} " not in self.conf.read_text():
            # first start, or a twin of an older layout: new ports, and no saved state of other nodes;
            # job ids start again, so the old jobcomp records would pass for the new jobs' history
            shutil.rmtree(self.dir / "state", ignore_errors=True)
            (self.dir / "state").mkdir()
            (self.dir / "log" / "jobcomp.txt").unlink(missing_ok=True)
            ports = [_free_port() for _ in range(2 + len(NODES))]
            self.conf.write_text(_twin_conf(self.lab.slurm_conf, self.dir, ports[0], ports[1], ports[2:]))
        if not _pid_alive(self.dir / "run" / "slurmctld.pid", "slurmctld"):
            result = self.run("/usr/sbin/slurmctld", "-f", str(self.conf))
            if result.returncode != 0:
                raise RuntimeError(f"slurmctld of the twin failed: {result.stderr.strip()}")
        self.pids.append((self.dir / "run" / "slurmctld.pid", "slurmctld"))
        _wait("slurmctld", lambda: self.run("scontrol", "ping").returncode == 0)
        for node in NODES:
            (self.dir / "spool" / node).mkdir(parents=True, exist_ok=True)
            pid_file = self.dir / "run" / f"slurmd-{node}.pid"
            if not _pid_alive(pid_file, "slurmd"):
                self.run("/usr/sbin/slurmd", "-f", str(self.conf), "-N", node)
            self.pids.append((pid_file, "slurmd"))

        def nodes_idle() -> bool:
            out = self.run("sinfo", "-h", "-N", "-o", "%N %t").stdout.split()
            states = dict(zip(out[::2], out[1::2], strict=False))
            for node, state in states.items():
                if state.startswith(("drain", "drng", "down")):
                    self.run("scontrol", "update", f"nodename={node}", "state=resume")
            usable = {"idle", "mix", "alloc", "comp"}  # completing: a leftover job is still being cleaned up
            return len(states) == len(NODES) and all(s.rstrip("*") in usable for s in states.values())

        # the twin is this plugin's own cluster: jobs left by an earlier, interrupted session only take CPUs
        self.run("scancel", "--user", USER)
        _wait("twin nodes idle", nodes_idle, timeout=120)
        return self._restd(key)

    def _write_wrappers(self) -> None:
        """<twin>/bin: the host's Slurm commands pointed at the twin, as `recovery lab up` writes them for a lab."""
        bin_dir = self.dir / "bin"
        bin_dir.mkdir(exist_ok=True)
        for command in ("squeue", "scontrol", "sacct", "sinfo", "sbatch", "scancel", "srun"):
            real = shutil.which(command, path="/usr/bin:/usr/sbin:/bin")
            if real is None:
                raise RuntimeError(f"{command} is not installed (apt-get install slurm-client)")
            wrapper = bin_dir / command
            wrapper.write_text(f'#!/bin/sh\nSLURM_CONF={self.conf}; export SLURM_CONF\nexec {real} "$@"\n')
            wrapper.chmod(0o755)

    def _daemon(self, name: str, auth: str, listen: str, env: dict[str, str]) -> None:
        """One slurmrestd (reused when its pid file names a live one)."""
        pid_file = self.dir / "run" / f"{name}.pid"
        if not _pid_alive(pid_file, "slurmrestd"):
            log = open(self.dir / "log" / f"{name}.log", "ab")  # noqa: SIM115 - handed to the daemon
            # slurmrestd must not run as root or SlurmUser (auth/jwt rejects tokens in such a process):
            # it drops to USER after opening its socket; over the unix socket it then acts as USER
            argv = ["slurmrestd", "-f", str(self.conf), "-u", USER, "-g", "nogroup", "-a", auth]
            argv += ["-s", "openapi/v0.0.36,openapi/v0.0.37,openapi/v0.0.38", listen]
            proc = subprocess.Popen(argv, env=env, stdout=log, stderr=log, start_new_session=True)
            log.close()
            self.children.append(proc)
            pid_file.write_text(str(proc.pid))
        self.pids.append((pid_file, "slurmrestd"))

    def _restd(self, key: Path) -> RestLab:
        sock = self.dir / "run" / "slurmrestd.sock"
        port_file = self.dir / "run" / "slurmrestd.port"
        if not (_pid_alive(self.dir / "run" / "slurmrestd-jwt.pid", "slurmrestd") and port_file.exists()):
            port_file.write_text(str(_free_port()))
        port = int(port_file.read_text())
        # SLURM_JWT=daemon makes slurmrestd hand tokens to auth/jwt (without it auth/munge rejects every
        # token: "Rejecting thread config token"); the unix-socket one must run without it
        self._daemon("slurmrestd-jwt", "rest_auth/jwt", f"127.0.0.1:{port}", dict(self.env, SLURM_JWT="daemon"))
        if not _pid_alive(self.dir / "run" / "slurmrestd-local.pid", "slurmrestd"):
            sock.unlink(missing_ok=True)
        self._daemon("slurmrestd-local", "rest_auth/local", f"unix:{sock}", self.env)

        def answers() -> bool:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return sock.exists()
            except OSError:
                return False

        _wait("slurmrestd", answers, timeout=30)
        session_dir = self.dir / "tests" / (time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6])
        session_dir.mkdir(parents=True, exist_ok=True)
        session_dir.chmod(0o1777)  # jobs of USER (not root) run here
        slurm = TwinLab(lab_dir=self.dir, slurm_conf=str(self.conf), accounting=False, session_dir=session_dir)
        slurm.rest = RestLab(
            slurm=slurm,
            cluster=CLUSTER,
            url=f"http://127.0.0.1:{port}",
            socket_url=f"unix:{sock}",
            jwt_key=str(key),
            directory=self.dir,
            release=host_version(),
        )
        return slurm.rest

    def stop(self) -> None:
        """Stop what this plugin started, by pid: slurmrestd and slurmd first, slurmctld last (SIGTERM, then
        SIGKILL after 15 s; pids are taken before the signal, as slurmd removes its pid file on SIGTERM)."""
        found = [(prog, pid) for pf, prog in reversed(self.pids) if (pid := _pid_alive(pf, prog))]
        for group in ([p for p in found if p[0] != "slurmctld"], [p for p in found if p[0] == "slurmctld"]):
            for _, pid in group:
                os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 15
            for prog, pid in group:
                while _running(pid, prog) and time.monotonic() < deadline:
                    time.sleep(0.1)
                if _running(pid, prog):
                    os.kill(pid, signal.SIGKILL)
        for child in self.children:
            child.wait(timeout=15)


def _running(pid: int, program: str) -> bool:
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe")).startswith(program)
    except OSError:
        return False


_RESTLAB: RestLab | None = None
_TWIN: _Twin | None = None


@contextlib.contextmanager
def controller_outage(restlab: RestLab | None = None) -> Iterator[None]:
    """The slurmctld behind `restlab` (default: the twin) stopped by its pid for the block, then started again
    (slurmd and slurmrestd stay); a release lab is brought back with `recovery lab up` and its own options."""
    if restlab is not None and not restlab.is_twin:
        lab = restlab.slurm
        with lab_lock():  # no other test process brings the lab up during the outage
            ctld = lab.daemon_pid("slurmctld")
            os.kill(ctld, signal.SIGTERM)
            deadline = time.monotonic() + 15
            while _running(ctld, "slurmctld") and time.monotonic() < deadline:
                time.sleep(0.1)
            try:
                yield
            finally:
                assert lab.up() == 0
        return
    assert _TWIN is not None, "needs the slurmrestd fixture"
    pid_file = _TWIN.dir / "run" / "slurmctld.pid"
    pid = _pid_alive(pid_file, "slurmctld")
    assert pid is not None
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    while _running(pid, "slurmctld") and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        yield
    finally:
        _TWIN.start()


@pytest.fixture(scope="session")
def slurmrestd() -> Iterator[RestLab]:
    """slurmrestd of 22.05 on the lab's twin cluster, JWT and unix socket; fails in CI and skips elsewhere."""
    global _RESTLAB, _TWIN
    twin: _Twin | None = None
    try:
        if not shutil.which("slurmrestd"):
            raise RuntimeError("slurmrestd is not installed (apt-get install slurmrestd slurm-wlm-jwt-plugin)")
        if not list(Path("/").glob(_JWT_PLUGIN_GLOB.lstrip("/"))):
            raise RuntimeError("Slurm's auth/jwt plugin is not installed (apt-get install slurm-wlm-jwt-plugin)")
        twin = _Twin(_start(host_version()))
        _RESTLAB = twin.start()
        _TWIN = twin
    except RuntimeError as exc:
        if twin is not None:
            twin.stop()
        require("slurmrestd", f"slurmrestd unavailable: {exc}")
    assert _RESTLAB is not None
    yield _RESTLAB
    _RESTLAB.slurm.cancel_submitted()
    twin.stop()
    _RESTLAB = _TWIN = None


@pytest.fixture(scope="session")
def rest_lab(slurm_version: str, request: pytest.FixtureRequest) -> RestLab:
    """slurmrestd of this test's release (`slurm_versions`): the JWT twin on the host's release, else the
    release lab's own slurmrestd (JWT, tokens for root, who owns the lab's jobs)."""
    if slurm_version == host_version():
        twin: RestLab = request.getfixturevalue("slurmrestd")
        return twin
    lab: SlurmLab = request.getfixturevalue("slurm_lab")
    if not lab.restd_url:
        require(f"slurmrestd of Slurm {slurm_version}", f"the {slurm_version} lab runs no slurmrestd")
    return RestLab(
        slurm=lab,
        cluster=lab.cluster,
        url=lab.restd_url or "",
        socket_url="",
        jwt_key=str(lab.lab_dir / "etc" / "jwt_hs256.key"),
        directory=lab.lab_dir,
        user="root",
        as_user=(),
        release=slurm_version,
        nodes=tuple(f"node{i}" for i in range(1, lab.nodes + 1)),
    )


@pytest.fixture(autouse=True)
def _cancel_twin_jobs_of_each_test() -> Iterator[None]:
    """Cancel what a test submitted to the twin when it ends, as slurm_lab does for the labs: the twin has 4 CPUs,
    and one test's leftovers (array siblings sleeping 90 s) kept the next test's jobs pending for their whole life."""
    before = len(_RESTLAB.slurm.submitted) if _RESTLAB is not None else 0
    yield
    if _RESTLAB is None:
        return
    twin = _RESTLAB.slurm
    leftovers = twin.submitted[before:]
    if leftovers:
        subprocess.run(
            [str(twin.bin_dir / "scancel"), *map(str, leftovers)],
            env=twin.env(),
            capture_output=True,
            timeout=30,
            check=False,
        )
