"""The `slurm_lab` fixture: the real Slurm lab (`recovery lab up`), started once per test session.

Register with `pytest_plugins = ["tests.plugins.slurm_lab"]` (tests/conftest.py) or import the
fixture in a conftest. The lab is left running after the session (the next `up` takes ~0.3 s);
jobs submitted through the helper are cancelled at the end so no slurmstepd lingers.
Unavailable lab (not root, no apt, daemons fail): the fixture FAILS when CI=true, else skips
with the reason. Environment: RECOVERY_LAB_DIR (default /tmp/recovery-lab), RECOVERY_LAB_DBD=1
for slurmdbd accounting (default off: jobcomp/filetxt gives per-attempt history via sacct -c).
"""

from __future__ import annotations

import io
import os
import re
import shutil
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
    submitted: list[int] = field(default_factory=list)

    def env(self, **extra: str) -> dict[str, str]:
        """The environment Slurm commands need (SLURM_CONF) plus `extra`."""
        env = dict(os.environ)
        env["SLURM_CONF"] = self.slurm_conf
        env.update({key: str(value) for key, value in extra.items()})
        return env

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
            ["sbatch", "--parsable", f"--chdir={directory}", *sbatch_args, str(script)],
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
            ["squeue", "-h", "-t", "all", "-j", str(job_id), "-o", "%T"],
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
            ["scontrol", "show", "job", "-o", str(job_id)],
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
                ["scancel", *map(str, self.submitted)], env=self.env(), capture_output=True, timeout=30, check=False
            )


_LAB: SlurmLab | None = None
_LAB_ERROR: str | None = None


def _start() -> SlurmLab:
    """Bring the lab up once per process (memoised, so two registrations never start it twice)."""
    global _LAB, _LAB_ERROR
    if _LAB is not None:
        return _LAB
    if _LAB_ERROR is not None:
        raise RuntimeError(_LAB_ERROR)
    try:
        if os.geteuid() != 0:
            raise RuntimeError("the Slurm lab needs root (apt-get, /run/munge); run the tests as root or with sudo -E")
        if not shutil.which("bash"):
            raise RuntimeError("the Slurm lab needs bash")
        lab_dir = default_lab_dir()
        accounting = os.environ.get("RECOVERY_LAB_DBD", "0").lower() in {"1", "true", "yes"}
        out = io.StringIO()
        rc = lab_run("up", nodes=3, dbd=accounting, lab_dir=lab_dir, out=out)
        if rc != 0:
            raise RuntimeError(f"`recovery lab up` failed with exit code {rc} (see its stderr above and {lab_dir}/log)")
        match = re.search(r"^export SLURM_CONF=(\S+)$", out.getvalue(), re.M)
        if not match:
            raise RuntimeError(f"`recovery lab up` printed no SLURM_CONF: {out.getvalue()!r}")
    except Exception as exc:
        _LAB_ERROR = f"Slurm lab unavailable: {exc}"
        raise RuntimeError(_LAB_ERROR) from None
    os.environ["SLURM_CONF"] = match.group(1)
    os.environ["RECOVERY_LAB_DIR"] = lab_dir
    session_dir = Path(lab_dir) / "tests" / (time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6])
    session_dir.mkdir(parents=True, exist_ok=True)
    _LAB = SlurmLab(lab_dir=Path(lab_dir), slurm_conf=match.group(1), accounting=accounting, session_dir=session_dir)
    return _LAB


@pytest.fixture(scope="session")
def slurm_lab() -> Iterator[SlurmLab]:
    """The running lab (3 nodes); fails in CI and skips elsewhere when it cannot start."""
    try:
        lab = _start()
    except RuntimeError as exc:
        require("the Slurm lab", str(exc))
    yield lab
    lab.cancel_submitted()


@pytest.fixture(autouse=True)
def _cancel_jobs_of_each_test() -> Iterator[None]:
    """Cancel what a test submitted when it ends, so its leftovers never hold the lab's few CPUs."""
    before = len(_LAB.submitted) if _LAB is not None else 0
    yield
    if _LAB is not None and len(_LAB.submitted) > before:
        leftovers = _LAB.submitted[before:]
        subprocess.run(["scancel", *map(str, leftovers)], env=_LAB.env(), capture_output=True, timeout=30, check=False)
