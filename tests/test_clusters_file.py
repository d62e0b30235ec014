"""RECOVERY_CLUSTERS_FILE: each cluster's own settings from one TOML file, and the worker's --cluster choice."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from app.cli import _selected_clusters
from app.infra.clusters import cluster_settings, every_cluster, load_clusters
from app.infra.config import Settings, SettingsError
from app.infra.context import AppContext
from app.leases.models import WorkerLease

ROOT = Path(__file__).resolve().parent.parent

FILE = """
[clusters.alpha]
environment = "prod-a"
slurm_conf = "/etc/slurm-alpha/slurm.conf"
managed_partitions = ["gpu", "gpu-long"]
acknowledge_scheduler_actions = true

[clusters.beta]
slurm_api = "rest"
slurmrestd_url = "http://beta-ctl:6820"
slurmrestd_jwt_key = "/etc/recovery/beta-jwt.key"
poll_interval = 2
"""


def _settings(tmp_path, text: str = FILE) -> Settings:
    path = tmp_path / "clusters.toml"
    path.write_text(text)
    return Settings.build(data_dir=str(tmp_path), environment="shared", clusters_file=str(path))


def test_each_cluster_gets_its_table_over_the_installation_settings(tmp_path) -> None:
    settings = _settings(tmp_path)
    alpha, beta = every_cluster(settings)
    assert (alpha.cluster, alpha.environment, alpha.slurm_conf, alpha.slurm_api) == (
        "alpha",
        "prod-a",
        "/etc/slurm-alpha/slurm.conf",
        "cli",
    )
    assert alpha.managed_partitions == ("gpu", "gpu-long") and alpha.acknowledge_scheduler_actions is True
    assert (beta.cluster, beta.environment, beta.slurm_api, beta.poll_interval) == ("beta", "shared", "rest", 2.0)
    assert beta.database_url == alpha.database_url == settings.database_url  # one database for all
    assert cluster_settings(settings, "beta") == beta


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[clusters.a]\ndatabase_url = 'sqlite://'\n", "installation-wide"),
        ("[clusters.a]\noidc_issuer = 'x'\n", "not a per-cluster setting"),
        ("[clusters.a]\nno_such = 1\n", "not a per-cluster setting"),
        ("[clusters.a]\nslurm_api = 'soap'\n", "expected one of cli, rest"),
        ("[other]\nx = 1\n", r"no \[clusters.NAME\] table"),
        ("[clusters.a\n", "is not TOML"),
    ],
)
def test_bad_files_are_refused_with_the_reason(tmp_path, text: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        load_clusters(_settings(tmp_path, text).clusters_file)


def test_worker_cluster_choice(tmp_path) -> None:
    settings = _settings(tmp_path)
    assert [s.cluster for s in _selected_clusters(argparse.Namespace(cluster=None, all_clusters=True), settings)] == [
        "alpha",
        "beta",
    ]
    with pytest.raises(SettingsError, match="not in RECOVERY_CLUSTERS_FILE"):
        _selected_clusters(argparse.Namespace(cluster="gamma", all_clusters=False), settings)
    assert [
        s.cluster for s in _selected_clusters(argparse.Namespace(cluster="beta", all_clusters=False), settings)
    ] == ["beta"]
    plain = Settings.build(data_dir=str(tmp_path))
    assert _selected_clusters(argparse.Namespace(cluster="solo", all_clusters=False), plain)[0].cluster == "solo"
    with pytest.raises(SettingsError, match="needs RECOVERY_CLUSTERS_FILE"):
        _selected_clusters(argparse.Namespace(cluster=None, all_clusters=True), plain)


@pytest.mark.slurm
def test_recovery_worker_all_clusters_runs_one_worker_per_cluster(tmp_path, slurm_lab) -> None:
    clusters = tmp_path / "clusters.toml"
    clusters.write_text(
        f'[clusters.east]\nslurm_conf = "{slurm_lab.slurm_conf}"\nenvironment = "e-{tmp_path.name}"\n'
        f'[clusters.west]\nslurm_conf = "{slurm_lab.slurm_conf}"\nenvironment = "w-{tmp_path.name}"\n'
    )
    env = {
        **os.environ,
        "RECOVERY_DATA_DIR": str(tmp_path),
        "RECOVERY_CLUSTERS_FILE": str(clusters),
        "RECOVERY_LEASE_SECONDS": "2",
    }
    env.pop("SLURM_CONF", None)  # each cluster's slurm_conf says which slurm.conf its commands read
    upgrade = subprocess.run([sys.executable, "-m", "app.cli", "db", "upgrade"], cwd=ROOT, env=env, timeout=60)
    assert upgrade.returncode == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "worker", "--all-clusters"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )

    async def holders() -> dict[str, str]:
        context = AppContext.open(Settings.build(data_dir=str(tmp_path)))
        try:
            async with context.sessions() as session:
                return {row.name: row.holder for row in (await session.scalars(select(WorkerLease))).all()}
        finally:
            await context.close()

    try:
        deadline = time.monotonic() + 60
        while set(asyncio.run(holders())) != {"worker:east", "worker:west"}:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, "the two workers took no leases"
            time.sleep(0.2)
        held = asyncio.run(holders())
    finally:
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0, output
    assert "worker for cluster 'east' running" in output and "worker for cluster 'west' running" in output
    assert held["worker:east"] != held["worker:west"]  # each its own runner and holder
