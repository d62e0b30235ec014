"""Helpers of the API tests: GraphQL operations, fake tokens, a real uvicorn server (rows: tests.factories)."""

from __future__ import annotations

import datetime as dt
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from app.auth import OPERATOR, VIEWER, AuthError, Principal
from tests.factories import CLUSTER

ROOT = Path(__file__).resolve().parents[2]


OPERATIONS = ROOT / "graphql" / "operations"


def operation(name: str) -> str:
    """The text of graphql/operations/<name>.graphql."""
    return (OPERATIONS / f"{name}.graphql").read_text()


class FakeAuthenticator:
    """Maps fixed tokens to principals, so role tests need no identity provider."""

    requires_token = True
    PRINCIPALS = {
        "viewer-token": Principal(subject="u-viewer", name="vera", email=None, roles=frozenset({VIEWER})),
        "operator-token": Principal(subject="u-operator", name="otto", email=None, roles=frozenset({VIEWER, OPERATOR})),
    }

    async def verify(self, token: str) -> Principal:
        principal = self.PRINCIPALS.get(token)
        if principal is None:
            raise AuthError(401, "unknown test token")
        return principal


async def run_graphql(
    http: httpx.AsyncClient,
    query: str,
    variables: dict[str, Any] | None = None,
    *,
    token: str | None = None,
    expect_errors: bool = False,
) -> dict[str, Any]:
    """POST one operation to /graphql; returns the whole response body (asserts no errors unless expected)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = await http.post("/graphql", json={"query": query, "variables": variables or {}}, headers=headers)
    body = response.json()
    if not expect_errors:
        assert response.status_code == 200 and not body.get("errors"), body
    return body


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class LiveServer:
    """`recovery serve` in its own process on a loopback port."""

    url: str
    process: subprocess.Popen[str]
    log_path: Path

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://", 1) + "/graphql"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def start_server(database_url: str, tmp_path: Path, **env: str) -> LiveServer:
    """Start `python -m app.cli serve` (API only; no worker) and wait for /healthz."""
    port = free_port()
    log_path = tmp_path / f"serve-{port}.log"
    environment = {
        **os.environ,
        "RECOVERY_DATABASE_URL": database_url,
        "RECOVERY_DATA_DIR": str(tmp_path),
        "RECOVERY_BIND": f"127.0.0.1:{port}",
        "RECOVERY_CLUSTER": CLUSTER,
        **env,
    }
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve"],
            cwd=ROOT,
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
    server = LiveServer(
        url=f"http://127.0.0.1:{port}{env.get('RECOVERY_URL_PREFIX', '')}", process=process, log_path=log_path
    )
    deadline = time.monotonic() + 90  # a loaded CI machine has taken 30 s to import and migrate-check
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            stop_server(server)
            raise RuntimeError(f"recovery serve did not start:\n{server.log()}")
        time.sleep(0.1)


def stop_server(server: LiveServer) -> None:
    if server.process.poll() is None:
        server.process.terminate()
        try:
            server.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait(timeout=10)


def iso(value: dt.datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")
