"""The ASGI app answers health checks; the `recovery` command runs the service and migrations."""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from app.infra.config import Settings
from app.main import create_app
from tests.plugins.database import Database

ROOT = Path(__file__).resolve().parent.parent


async def test_healthz_and_readyz(database: Database, settings: Settings) -> None:
    from app.infra.context import AppContext

    ctx = AppContext(settings=settings, engine=database.engine, sessions=database.sessions)
    app = create_app(settings, ctx=ctx)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        health = await client.get("/healthz")
        ready = await client.get("/readyz")
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    assert "frame-ancestors 'none'" in health.headers["content-security-policy"]
    assert health.headers["x-frame-options"] == "DENY"


async def test_readyz_reports_an_unmigrated_database(tmp_path: Path) -> None:
    settings = Settings.build(database_url=f"sqlite+aiosqlite:///{tmp_path}/empty.db", data_dir=str(tmp_path))
    app = create_app(settings)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            ready = await client.get("/readyz")
    finally:
        await app.state.ctx.close()
    assert ready.status_code == 503 and "recovery db upgrade" in ready.json()["database"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _recovery(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def test_db_upgrade_command(tmp_path: Path) -> None:
    env = {**os.environ, "RECOVERY_DATA_DIR": str(tmp_path)}
    first = _recovery("db", "current", env=env)
    assert first.returncode == 1 and "revision None" in first.stdout
    upgraded = _recovery("db", "upgrade", env=env)
    assert upgraded.returncode == 0, upgraded.stderr
    assert _recovery("db", "current", env=env).returncode == 0
    assert (tmp_path / "recovery.db").exists()


def test_up_refuses_to_run_without_auth_and_dev_mode_off_loopback(tmp_path: Path) -> None:
    env = {**os.environ, "RECOVERY_DATA_DIR": str(tmp_path)}
    env.pop("RECOVERY_OIDC_ISSUER", None)
    refused = _recovery("up", env=env)
    assert refused.returncode == 2 and "RECOVERY_OIDC_ISSUER" in refused.stderr
    exposed = _recovery("up", env={**env, "RECOVERY_DEV_NO_AUTH": "true", "RECOVERY_BIND": "0.0.0.0:8999"})
    assert exposed.returncode == 2 and "loopback" in exposed.stderr


def test_up_serves_healthz(tmp_path: Path) -> None:
    port = _free_port()
    env = {
        **os.environ,
        "RECOVERY_DATA_DIR": str(tmp_path),
        "RECOVERY_DEV_NO_AUTH": "true",
        "RECOVERY_BIND": f"127.0.0.1:{port}",
        "RECOVERY_CLUSTER": "healthz-test",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "up"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except httpx.TransportError:
                assert proc.poll() is None, (proc.returncode, proc.stdout.read() if proc.stdout else "")
                assert time.monotonic() < deadline, "service did not answer within 30 s"
                time.sleep(0.2)
        assert response.status_code == 200
        assert httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).json()["status"] == "ready"
    finally:
        proc.terminate()
        output = proc.communicate(timeout=20)[0]
    # uvicorn shuts down gracefully, then re-raises SIGTERM so the exit status tells it was signalled.
    assert proc.returncode in (0, -15), output
    assert "Application shutdown complete" in output
    assert "AUTHENTICATION IS DISABLED" in output
