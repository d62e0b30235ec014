"""Prometheus metrics: a real Prometheus scrapes serve, worker and watchdog processes; the dashboard uses real names."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.infra import metrics
from app.infra.config import Settings, SettingsError
from tests.plugins import require

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "docs" / "grafana-dashboard.json"
FORBIDDEN_LABELS = {"job_id", "slurm_job_id", "attempt", "attempt_index", "advice_id", "path", "user", "url"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, log.read_text()
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, f"{url} never answered:\n{log.read_text()}"
        time.sleep(0.2)


def test_metrics_bind_setting_is_validated() -> None:
    assert Settings.from_env({}).metrics_bind == ""
    assert Settings.from_env({"RECOVERY_METRICS_BIND": ":9464"}).metrics_bind == "127.0.0.1:9464"
    with pytest.raises(SettingsError, match="RECOVERY_METRICS_BIND"):
        Settings.from_env({"RECOVERY_METRICS_BIND": "localhost"})
    assert metrics.start_listener("") is None  # off by default: nothing listens


def test_labels_are_bounded() -> None:
    for metric in metrics.REGISTRY.collect():
        if metric.name.startswith("recovery_"):
            for sample in metric.samples:
                assert not FORBIDDEN_LABELS & set(sample.labels), (metric.name, sample.labels)
    assert metrics.route_family("/x/graphql", "/x") == "graphql"
    assert metrics.route_family("/v1/jobs/123") == "rest"
    assert metrics.route_family("/dashboard/jobs/42/attempts/0") == "dashboard"
    assert metrics.route_family("/../etc/passwd") == "other"


def test_grafana_dashboard_parses_and_uses_only_exported_metrics() -> None:
    board = json.loads(DASHBOARD.read_text())
    exprs: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("expr"), str):
                exprs.append(node["expr"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(board)
    assert len(exprs) >= 10, exprs
    used = {name for expr in exprs for name in re.findall(r"\brecovery_[a-z0-9_]+", expr)}
    exported = metrics.exported_series()
    assert used and used <= exported, sorted(used - exported)
    # every metric family the service defines is on the dashboard
    families = {name.removesuffix("_total") for name in metrics.EXPORTED}
    shown = {re.sub(r"_(bucket|sum|count|total)$", "", name) for name in used}
    assert families <= shown, sorted(families - shown)


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[dict[str, int]]:
    """`recovery serve`, `worker`, `watchdog` and `up` (another cluster), each with its own metrics listener."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECOVERY_")}
    env.update(
        RECOVERY_DATA_DIR=str(tmp_path / "data"),
        RECOVERY_DEV_NO_AUTH="true",
        RECOVERY_CLUSTER="metrics-test",
        RECOVERY_WATCHDOG_PROCESS="separate",
        RECOVERY_LEASE_SECONDS="3",
        # No Slurm here: every squeue fails the same way, which the failure counter must show.
        RECOVERY_SLURM_BIN_DIR=str(tmp_path / "no-slurm"),
    )
    cli = [sys.executable, "-m", "app.cli"]
    subprocess.run([*cli, "db", "upgrade"], env=env, check=True, capture_output=True, cwd=tmp_path)
    ports = {"serve": _free_port(), "worker": _free_port(), "watchdog": _free_port(), "up": _free_port()}
    api_port, up_api_port = _free_port(), _free_port()
    started: list[subprocess.Popen[bytes]] = []
    logs = []
    try:
        for kind, port in ports.items():
            log = tmp_path / f"{kind}.log"
            logs.append(log.open("w"))
            own = {"RECOVERY_METRICS_BIND": f"127.0.0.1:{port}", "RECOVERY_BIND": f"127.0.0.1:{api_port}"}
            if kind == "up":  # API and worker in one process, on a cluster of its own (its own lease)
                own.update(RECOVERY_BIND=f"127.0.0.1:{up_api_port}", RECOVERY_CLUSTER="metrics-up")
            proc = subprocess.Popen(
                [*cli, kind],
                env={**env, **own},
                cwd=tmp_path,
                stdout=logs[-1],
                stderr=subprocess.STDOUT,
            )
            started.append(proc)
            _wait_http(f"http://127.0.0.1:{port}/metrics", proc, log)
        _wait_http(f"http://127.0.0.1:{api_port}/healthz", started[0], tmp_path / "serve.log")
        _wait_http(f"http://127.0.0.1:{up_api_port}/healthz", started[3], tmp_path / "up.log")
        httpx.post(f"http://127.0.0.1:{api_port}/graphql", json={"query": "{ __typename }"}, timeout=10)
        yield {**ports, "api": api_port}
    finally:
        for proc in started:
            proc.terminate()
        for proc in started:
            proc.wait(timeout=20)
        for handle in logs:
            handle.close()


@pytest.fixture
def prometheus(tmp_path: Path, processes: dict[str, int]) -> Iterator[str]:
    """A real Prometheus (Debian's package) scraping the three listeners every second."""
    binary = shutil.which("prometheus")
    if binary is None:
        require("prometheus", "Debian's prometheus package is not installed (.ci/bootstrap installs it)")
    port = _free_port()
    targets = [f"127.0.0.1:{processes[kind]}" for kind in ("serve", "worker", "watchdog", "up")]
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: recovery\n    static_configs:\n"
        f"      - targets: {json.dumps(targets)}\n"
    )
    log = tmp_path / "prometheus.log"
    handle = log.open("w")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=handle,
        stderr=subprocess.STDOUT,
    )
    try:
        _wait_http(f"http://127.0.0.1:{port}/-/ready", proc, log)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        handle.close()


def _query(base: str, promql: str, *, until: int) -> list[dict[str, Any]]:
    """Results of an instant query, waiting (bounded) until at least `until` series are there."""
    deadline = time.monotonic() + 60
    while True:
        body = httpx.get(f"{base}/api/v1/query", params={"query": promql}, timeout=10).json()
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        if len(result) >= until:
            return result
        assert time.monotonic() < deadline, f"{promql}: {result}"
        time.sleep(0.5)


@pytest.mark.slow
def test_real_prometheus_scrapes_every_process_kind(prometheus: str, processes: dict[str, int]) -> None:
    up = _query(prometheus, 'up{job="recovery"} == 1', until=4)
    assert {r["metric"]["instance"] for r in up} == {
        f"127.0.0.1:{processes[k]}" for k in ("serve", "worker", "watchdog", "up")
    }
    requests = _query(prometheus, 'recovery_api_request_seconds_count{family="health"}', until=1)
    assert float(requests[0]["value"][1]) >= 1
    graphql = _query(prometheus, 'recovery_api_request_seconds_count{family="graphql",method="POST"}', until=1)
    assert graphql[0]["metric"]["instance"] == f"127.0.0.1:{processes['serve']}"
    leases = _query(prometheus, "recovery_lease_held == 1", until=3)
    assert {r["metric"]["lease"] for r in leases} == {
        "worker:metrics-test",
        "watchdog:metrics-test",
        "worker:metrics-up",
    }
    epochs = _query(prometheus, "recovery_lease_epoch", until=3)
    assert all(float(r["value"][1]) >= 1 for r in epochs)
    failures = _query(prometheus, 'recovery_scheduler_command_failures_total{command="squeue"}', until=1)
    assert failures[0]["metric"]["error_class"] and float(failures[0]["value"][1]) >= 1
    active = _query(prometheus, 'recovery_active_advice{cluster="metrics-test"}', until=2)
    assert {r["metric"]["operation"] for r in active} >= {"RESTART", "TERMINATE"}
    # `up` serves the API and runs the worker in one process: both kinds of series come from it
    up_instance = f"127.0.0.1:{processes['up']}"
    _query(prometheus, f'recovery_api_request_seconds_count{{instance="{up_instance}"}}', until=1)
    _query(prometheus, f'recovery_scheduler_command_failures_total{{instance="{up_instance}"}}', until=1)
