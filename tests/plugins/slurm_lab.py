"""The `slurm_lab` fixture: the real Slurm lab (`recovery lab up`), started once per test session and version.

Register with `pytest_plugins = ["tests.plugins.slurm_lab"]` (tests/conftest.py) or import the
fixture in a conftest. The lab is left running after the session (the next `up` takes ~0.3 s);
jobs submitted through the helper are cancelled at the end so no slurmstepd lingers.
Unavailable lab (not root, no apt, daemons fail): the fixture FAILS when CI=true, else skips
with the reason.

Versions: a test marked `@pytest.mark.slurm_versions` runs once per Slurm release in
RECOVERY_TEST_SLURM_VERSIONS (default "22.05,24.11,26.05"; ids `[22.05]`, ...); every other lab
test runs on the host's own Slurm only. The host's release (22.05 on Debian 12) is the lab at
RECOVERY_LAB_DIR (default /tmp/recovery-lab, accounting per RECOVERY_LAB_DBD=1, default off:
jobcomp/filetxt gives per-attempt history via sacct -c); any other release is the lab at
`$RECOVERY_LAB_DIR-<version>` run from a cached Debian root, always with slurmdbd (on the
MariaDB at 127.0.0.1:3306), on its own ports. On those releases the tests run on PostgreSQL only
(the host release covers SQLite), which keeps the added suite time within a few minutes.
`slurm_scratch_lab` is a 1-node lab per version (`...-scratch`, slurmdbd, its own ports) for
tests that wipe slurmctld's state (jobs leaving squeue, job-id reuse): never the shared lab.
`slurm_framework_lab` is a 3-node lab of the host's release (`...-framework`, 25 ports above the host's lab)
for the real-PyTorch tests: their minutes of training run beside the shared lab's tests, not in front of them.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from app.lab.cli import default_lab_dir
from app.lab.cli import run as lab_run
from tests.plugins import require

_KEY_SPLIT = re.compile(r" (?=[A-Za-z][\w:/]*=)")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass
class SlurmLab:
    """Handle on the running lab for integration tests: submit jobs, wait for states, inspect them."""

    lab_dir: Path
    slurm_conf: str
    accounting: bool
    session_dir: Path
    version: str = "host"
    release: str = "host"  # "22.05", "24.11", "26.05": what slurm_versions tests are parametrised with
    nodes: int = 3
    port_offset: int | None = None
    restd_url: str | None = None  # slurmrestd (JWT) of releases other than the host's
    jwt: str | None = None  # a root token for it (24 h), as `scontrol token` printed it
    submitted: list[int] = field(default_factory=list)

    @property
    def cluster(self) -> str:
        """ClusterName of the lab's slurm.conf (lab, lab2411, lab2605: each release is its own cluster)."""
        match = re.search(r"^ClusterName=(\S+)$", Path(self.slurm_conf).read_text(), re.M)
        return match.group(1) if match else ""

    @property
    def bin_dir(self) -> Path:
        """The lab's wrappers (squeue, scontrol, ...) of its own Slurm release: RECOVERY_SLURM_BIN_DIR."""
        return self.lab_dir / "bin"

    def env(self, **extra: str) -> dict[str, str]:
        """The environment Slurm commands need (SLURM_CONF; the lab's bin/ first on PATH) plus `extra`."""
        env = dict(os.environ)
        env["SLURM_CONF"] = self.slurm_conf
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', os.defpath)}"
        env["RECOVERY_SLURM_BIN_DIR"] = str(self.bin_dir)
        env.update({key: str(value) for key, value in extra.items()})
        return env

    def up(self) -> int:
        """`recovery lab up` again with this lab's options (after a test stopped a daemon); the exit code."""
        with lab_lock():
            return lab_run(
                "up",
                nodes=self.nodes,
                dbd=self.accounting,
                lab_dir=str(self.lab_dir),
                slurm=self.version,
                restd=self.restd_url is not None,
                port_offset=self.port_offset,
                out=io.StringIO(),
            )

    def daemon_pid(self, name: str) -> int:
        """The pid of one of the lab's daemons (slurmctld, slurmdbd, slurmd-node1, ...) from its pid file."""
        return int((self.lab_dir / "run" / f"{name}.pid").read_text().strip())

    def wipe_state(self) -> None:
        """Stop the lab, delete slurmctld's saved state (jobs, the job-id counter) and start it again.

        What a controller that lost StateSaveLocation does: every job leaves squeue at once, job ids
        start again at 1, and only accounting (slurmdbd) remembers the earlier jobs. Scratch labs only.
        """
        assert "scratch" in self.lab_dir.name, "wipe_state is for the scratch lab, never the shared one"
        with lab_lock():
            pid = self.daemon_pid("slurmctld")
            os.kill(pid, signal.SIGTERM)  # slurmd and slurmdbd keep running, as at a site
            deadline = time.monotonic() + 30
            while Path(f"/proc/{pid}").exists():
                assert time.monotonic() < deadline, f"slurmctld {pid} did not stop"
                time.sleep(0.1)
            shutil.rmtree(self.lab_dir / "state", ignore_errors=True)
            assert self.up() == 0

    def test_dir(self) -> Path:
        """A directory of its own for the currently running test (from PYTEST_CURRENT_TEST)."""
        current = os.environ.get("PYTEST_CURRENT_TEST", "outside-test").split(" ")[0]
        path = self.session_dir / _UNSAFE.sub("_", current.rsplit("/", 1)[-1])[:150]
        path.mkdir(parents=True, exist_ok=True)
        return path

    def submit(self, script_text: str, *, sbatch_args: Sequence[str] = (), **env: str) -> int:
        """Write the script into this test's directory and `sbatch --parsable` it; env vars reach the job."""
        directory = self.test_dir()
        script = directory / f"job-{uuid.uuid4().hex[:8]}.sh"
        script.write_text(script_text)
        result = subprocess.run(
            [str(self.bin_dir / "sbatch"), "--parsable", f"--chdir={directory}", *sbatch_args, str(script)],
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if result.returncode != 0:
            raise AssertionError(f"sbatch failed ({result.returncode}): {result.stderr.strip()}")
        job_id = int(result.stdout.strip().split(";", 1)[0])
        self.submitted.append(job_id)
        return job_id

    def state(self, job_id: int) -> str:
        """The job's state as `squeue -t all` prints it ('' when unknown)."""
        result = subprocess.run(
            [str(self.bin_dir / "squeue"), "-h", "-t", "all", "-j", str(job_id), "-o", "%T"],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=15,
            check=False,
        )
        return result.stdout.strip().splitlines()[0] if result.stdout.strip() else ""

    def wait_state(self, job_id: int, state: str | Collection[str], timeout: float = 120.0) -> str:
        """Poll until the job reaches `state` (or one of several); AssertionError with details on timeout."""
        wanted = {state} if isinstance(state, str) else set(state)
        deadline = time.monotonic() + timeout
        current = ""
        while time.monotonic() < deadline:
            current = self.state(job_id)
            if current in wanted:
                return current
            time.sleep(0.1)
        details = self.scontrol_show(job_id)
        raise AssertionError(
            f"job {job_id} not {sorted(wanted)} after {timeout}s: {current or 'unknown'} "
            f"(Reason={details.get('Reason')}, NodeList={details.get('NodeList')})"
        )

    def scontrol_show(self, job_id: int) -> dict[str, str]:
        """`scontrol show job -o` as a dict, for assertions only (values with ' Key=' inside are split)."""
        result = subprocess.run(
            [str(self.bin_dir / "scontrol"), "show", "job", "-o", str(job_id)],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=15,
            check=False,
        )
        fields: dict[str, str] = {}
        for part in _KEY_SPLIT.split(result.stdout.strip()):
            key, sep, value = part.partition("=")
            if sep:
                fields[key] = value.strip()
        return fields

    def cancel_submitted(self) -> None:
        """Cancel every job this session submitted (finished ones are ignored by scancel)."""
        if self.submitted:
            subprocess.run(
                [str(self.bin_dir / "scancel"), *map(str, self.submitted)],
                env=self.env(),
                capture_output=True,
                timeout=30,
                check=False,
            )


VERSIONS = ("22.05", "24.11", "26.05")
_HOST_SUITES = {"bookworm": "22.05", "trixie": "24.11", "forky": "26.05"}
_LABS: dict[str, SlurmLab] = {}
_LAB_ERRORS: dict[str, str] = {}


def host_version() -> str:
    """The Slurm release of the host's own Debian packages ("host" on an unknown release)."""
    try:
        fields = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
    except OSError:
        return "host"
    return _HOST_SUITES.get(fields.get("VERSION_CODENAME", "").strip('"'), "host")


def versions_under_test() -> list[str]:
    """The releases `slurm_versions` tests run on: RECOVERY_TEST_SLURM_VERSIONS, default all three."""
    raw = os.environ.get("RECOVERY_TEST_SLURM_VERSIONS", ",".join(VERSIONS))
    wanted = [item.strip() for item in raw.split(",") if item.strip()]
    unknown = [item for item in wanted if item not in (*VERSIONS, "host")]
    if unknown:
        raise pytest.UsageError(f"RECOVERY_TEST_SLURM_VERSIONS: unknown {unknown}; known {', '.join(VERSIONS)}")
    return [host_version() if item == "host" else item for item in dict.fromkeys(wanted)]


# The labs of one release besides its shared one: directory suffix, ports above the shared lab's, nodes.
_KINDS = {"shared": ("", 0, 3), "scratch": ("-scratch", 50, 1), "framework": ("-framework", 25, 3)}


def _lab_dir(version: str, *, kind: str) -> str:
    base = default_lab_dir().rstrip("/")
    if version != host_version():
        base = f"{base}-{version}"
    return base + _KINDS[kind][0]


_LOCK_DEPTH: list[int] = [0]


@contextlib.contextmanager
def lab_lock() -> Iterator[None]:
    """One `lab up`/`down` (or a test's stopped daemon) at a time across this run's processes: parallel test
    workers (tests/plugins/parallel.py) may bring up the same lab, or labs in the same Debian root, at once.

    Held by a process, it may be taken again by it (a test that stopped a daemon holds it until `up()`).
    """
    if _LOCK_DEPTH[0]:
        _LOCK_DEPTH[0] += 1
        try:
            yield
        finally:
            _LOCK_DEPTH[0] -= 1
        return
    with open(f"{default_lab_dir().rstrip('/')}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        _LOCK_DEPTH[0] = 1
        try:
            yield
        finally:
            _LOCK_DEPTH[0] = 0
            fcntl.flock(handle, fcntl.LOCK_UN)


def _start(version: str, *, kind: str = "shared") -> SlurmLab:
    """Bring one lab up once per process (memoised per version and kind, so two registrations never start it
    twice). `kind`: the release's shared lab, its scratch lab or its framework lab (see the module's docstring)."""
    scratch = kind == "scratch"
    key = version + _KINDS[kind][0]
    if key in _LABS:
        return _LABS[key]
    if key in _LAB_ERRORS:
        raise RuntimeError(_LAB_ERRORS[key])
    lab_dir = _lab_dir(version, kind=kind)
    host = version == host_version()
    slurm = None if host and not scratch else (None if version == "host" else version)
    # the scratch and framework labs sit above their version's lab, whatever RECOVERY_LAB_PORT_OFFSET adds
    offset = int(os.environ.get("RECOVERY_LAB_PORT_OFFSET", "0") or 0) + _KINDS[kind][1]
    nodes = _KINDS[kind][2]
    try:
        if os.geteuid() != 0:
            raise RuntimeError("the Slurm lab needs root (apt-get, /run/munge); run the tests as root or with sudo -E")
        if not shutil.which("bash"):
            raise RuntimeError("the Slurm lab needs bash")
        dbd_env = os.environ.get("RECOVERY_LAB_DBD", "0").lower() in {"1", "true", "yes"}
        accounting = dbd_env if host and not scratch else True
        # newer releases also run slurmrestd, so that REST clients can be tested against the same labs
        restd = not host and not scratch
        out = io.StringIO()

        def up() -> int:
            return lab_run(
                "up",
                nodes=nodes,
                dbd=accounting,
                lab_dir=lab_dir,
                slurm=slurm,
                restd=restd,
                port_offset=offset,
                out=out,
            )

        with lab_lock():
            rc = up()
            if rc != 0:
                # one more try from stopped daemons: a daemon that came up too slowly on a loaded machine
                # (the error and the daemons' last log lines are in the captured stderr above)
                lab_run("down", lab_dir=lab_dir, out=io.StringIO())
                out.seek(0)
                out.truncate()
                rc = up()
        if rc != 0:
            raise RuntimeError(
                f"`recovery lab up --slurm {version}` failed with exit code {rc} "
                f"(see its stderr above and {lab_dir}/log)"
            )
        match = re.search(r"^export SLURM_CONF=(\S+)$", out.getvalue(), re.M)
        if not match:
            raise RuntimeError(f"`recovery lab up` printed no SLURM_CONF: {out.getvalue()!r}")
    except Exception as exc:
        _LAB_ERRORS[key] = f"Slurm lab {key} unavailable: {exc}"
        raise RuntimeError(_LAB_ERRORS[key]) from None
    if host and kind == "shared":
        os.environ["SLURM_CONF"] = match.group(1)
        os.environ["RECOVERY_LAB_DIR"] = lab_dir
    session_dir = Path(lab_dir) / "tests" / (time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6])
    session_dir.mkdir(parents=True, exist_ok=True)
    exports = dict(re.findall(r"^export (\w+)=(\S*)$", out.getvalue(), re.M))
    _LABS[key] = SlurmLab(
        lab_dir=Path(lab_dir),
        slurm_conf=match.group(1),
        accounting=accounting,
        session_dir=session_dir,
        version=slurm or "host",
        release=version,
        nodes=nodes,
        port_offset=offset,
        restd_url=exports.get("SLURMRESTD_URL"),
        jwt=exports.get("SLURM_JWT"),
    )
    return _LABS[key]


def start_lab(version: str) -> SlurmLab:
    """The shared lab of one release (started once per process), for tests that need several at once."""
    return _start(version)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests marked `slurm_versions` run once per release in RECOVERY_TEST_SLURM_VERSIONS."""
    if "slurm_version" in metafunc.fixturenames and metafunc.definition.get_closest_marker("slurm_versions"):
        metafunc.parametrize("slurm_version", versions_under_test(), indirect=True, scope="session")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On releases other than the host's, lab tests run on PostgreSQL only (the host's covers SQLite);
    tests marked `slurm_several_versions` run only when RECOVERY_TEST_SLURM_VERSIONS names another release."""
    host = host_version()
    several = len(versions_under_test()) > 1 and any(v != host for v in versions_under_test())
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        version, backend = params.get("slurm_version"), params.get("database")
        off_matrix = version not in (None, host) and backend == "sqlite"
        # asked for the host's release only: tests of several releases at once are not part of the run
        alone = not several and item.get_closest_marker("slurm_several_versions") is not None
        (dropped if off_matrix or alone else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(scope="session")
def slurm_version(request: pytest.FixtureRequest) -> str:
    """The Slurm release of this test's lab (the host's unless the test is marked `slurm_versions`)."""
    return str(getattr(request, "param", host_version()))


@pytest.fixture(scope="session")
def slurm_lab(slurm_version: str) -> Iterator[SlurmLab]:
    """The running lab of this release (3 nodes); fails in CI and skips elsewhere when it cannot start."""
    try:
        lab = _start(slurm_version)
    except RuntimeError as exc:
        require(f"the Slurm {slurm_version} lab", str(exc))
    yield lab
    lab.cancel_submitted()


@pytest.fixture(scope="session")
def slurm_scratch_lab(slurm_version: str) -> Iterator[SlurmLab]:
    """A 1-node lab of this release with slurmdbd whose state tests may wipe (never the shared lab)."""
    try:
        lab = _start(slurm_version, kind="scratch")
    except RuntimeError as exc:
        require(f"the Slurm {slurm_version} scratch lab", str(exc))
    yield lab
    lab.cancel_submitted()


@pytest.fixture(scope="session")
def slurm_framework_lab(slurm_version: str) -> Iterator[SlurmLab]:
    """A 3-node lab of this release for real-framework jobs (minutes of training each), beside the shared one."""
    try:
        lab = _start(slurm_version, kind="framework")
    except RuntimeError as exc:
        require(f"the Slurm {slurm_version} framework lab", str(exc))
    yield lab
    lab.cancel_submitted()


@pytest.fixture(autouse=True)
def _cancel_jobs_of_each_test() -> Iterator[None]:
    """Cancel what a test submitted when it ends, so its leftovers never hold the lab's few CPUs."""
    before = {key: len(lab.submitted) for key, lab in _LABS.items()}
    yield
    for key, lab in list(_LABS.items()):
        leftovers = lab.submitted[before.get(key, 0) :]
        if leftovers:
            subprocess.run(
                [str(lab.bin_dir / "scancel"), *map(str, leftovers)],
                env=lab.env(),
                capture_output=True,
                timeout=30,
                check=False,
            )
