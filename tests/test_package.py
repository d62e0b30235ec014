"""The built wheel is a complete package: installed into a fresh venv outside the checkout, it migrates and serves.

The wheel is built from this checkout (`pip wheel --no-deps`), its run-time dependencies come from a
wheelhouse cached by the hash of requirements/lock.txt and pyproject.toml (built once with `pip wheel -c lock.txt`), and
the fresh venv has no system site-packages and no path back into the checkout.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements" / "lock.txt"
CACHE = Path(os.environ.get("RECOVERY_TEST_CACHE") or Path.home() / ".cache" / "recovery-tests")

pytestmark = pytest.mark.slow


def _pip(*args: str, python: str = sys.executable) -> None:
    """Run pip of the project venv (optionally targeting another interpreter) and fail with its output."""
    cmd = [sys.executable, "-m", "pip", *args]
    if python != sys.executable:
        cmd = [sys.executable, "-m", "pip", "--python", python, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=CACHE)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}"


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "RECOVERY_"))}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv (outside the checkout) with the freshly built wheel and its locked dependencies."""
    CACHE.mkdir(parents=True, exist_ok=True)
    build_dir = tmp_path_factory.mktemp("wheel")
    _pip("wheel", "--no-deps", "-q", "-w", str(build_dir), str(ROOT))
    (wheel,) = build_dir.glob("recovery-*.whl")
    # Keyed by the lock and the declared dependencies: a new dependency (even before re-locking) builds a new one.
    key = hashlib.sha256(LOCK.read_bytes() + (ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]
    wheelhouse = CACHE / f"wheelhouse-{key}"
    if not (wheelhouse / ".complete").exists():
        _pip("wheel", "-q", "-c", str(LOCK), "-w", str(wheelhouse), str(wheel))
        (wheelhouse / ".complete").touch()
    venv = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    assert "include-system-site-packages = false" in (venv / "pyvenv.cfg").read_text()
    _pip(
        "install", "-q", "--no-index", "--find-links", str(wheelhouse), str(wheel), python=str(venv / "bin" / "python")
    )
    return venv


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_installed_package_is_imported_from_the_venv_not_the_checkout(installed: Path, tmp_path: Path) -> None:
    code = (
        "import app, app.infra.resources as r, app.lab.cli as lab; print(app.__file__); "
        "print(r.resource_dir('migrations')); print(r.resource_dir('graphql')); print(r.resource_dir('examples')); "
        "print(lab.script_path())"
    )
    proc = subprocess.run(
        [str(installed / "bin" / "python"), "-c", code], capture_output=True, text=True, cwd=tmp_path, env=_clean_env()
    )
    assert proc.returncode == 0, proc.stderr
    module, migrations, graphql, examples, lab = (Path(line) for line in proc.stdout.split())
    for path in (module, migrations, graphql, examples, lab):
        assert path.is_relative_to(installed) and path.exists(), path
    assert sorted(p.name for p in (migrations / "versions").glob("*.py")) == sorted(
        p.name for p in (ROOT / "migrations" / "versions").glob("*.py")
    )
    assert (graphql / "schema.graphql").read_text() == (ROOT / "graphql" / "schema.graphql").read_text()
    assert {p.name for p in (graphql / "operations").glob("*.graphql")} == {
        p.name for p in (ROOT / "graphql" / "operations").glob("*.graphql")
    }
    assert (examples / "crash.sbatch").exists() and (examples / "hang.sbatch").exists()


@pytest.fixture
def served(installed: Path, tmp_path: Path) -> Iterator[str]:
    """`recovery db upgrade` then `recovery serve` of the installed wheel, run from an unrelated directory."""
    port = _free_port()
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    env = _clean_env(
        RECOVERY_DATA_DIR=str(tmp_path / "data"),
        RECOVERY_BIND=f"127.0.0.1:{port}",
        RECOVERY_DEV_NO_AUTH="true",
        RECOVERY_CLUSTER="pkg",
    )
    recovery = str(installed / "bin" / "recovery")
    upgrade = subprocess.run([recovery, "db", "upgrade"], capture_output=True, text=True, cwd=workdir, env=env)
    assert upgrade.returncode == 0, upgrade.stderr
    assert re.search(r"database at revision (\w+) \(head \1\)", upgrade.stdout), upgrade.stdout
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen([recovery, "serve"], cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


def test_wheel_migrates_and_serves_from_another_directory(served: str) -> None:
    with httpx.Client(base_url=served, timeout=10) as client:
        health = client.get("/healthz")
        assert health.json()["status"] == "ok"
        assert client.get("/readyz").json()["status"] == "ready"

        page = client.get("/dashboard/workflow")
        assert page.status_code == 200 and "<html" in page.text.lower()
        assets = sorted(set(re.findall(r'(?:src|href)="([^"]*/static/[^"]+)"', page.text)))
        assert any(a.endswith(".css") for a in assets) and any(a.endswith(".js") for a in assets), assets
        for asset in assets:
            response = client.get(asset)
            assert response.status_code == 200 and response.content, asset

        query = (ROOT / "graphql" / "operations" / "WorkflowsPage.graphql").read_text()
        answer = client.post("/graphql", json={"query": query, "variables": {"first": 5}})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert "errors" not in body, body
        assert body["data"]["workflows"]["edges"] == []

    # The container image's health check (docs/deploy/healthcheck.py) passes against it, and fails without it.
    check = [sys.executable, str(ROOT / "docs" / "deploy" / "healthcheck.py")]
    port = served.rsplit(":", 1)[1]
    assert subprocess.run(check, env=_clean_env(RECOVERY_BIND=f"0.0.0.0:{port}")).returncode == 0
    assert subprocess.run(check, env=_clean_env(RECOVERY_BIND=f"0.0.0.0:{_free_port()}")).returncode == 1
