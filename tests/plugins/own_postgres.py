"""A PostgreSQL server of the test's own (initdb + pg_ctl in a temp dir, free port), which the test may stop and start.

The shared server on 5432 must never be stopped; outage tests use this one. initdb refuses to run
as root, so the server runs as the `postgres` user when the tests run as root.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.plugins import require


def _bin(name: str) -> str | None:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found[-1] if found else shutil.which(name)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class OwnPostgres:
    """initdb'd data directory and a server on ``port`` that ``stop()`` and ``start()`` control."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data = root / "data"
        self.port = _free_port()
        self.url = f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/postgres"
        self._as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def _run(self, *args: str) -> None:
        subprocess.run([*self._as_user, *args], check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        initdb = _bin("initdb")
        if initdb is None:
            require("PostgreSQL server binaries (initdb)", "not found under /usr/lib/postgresql/*/bin")
        if self._as_user:
            shutil.chown(self.root, "postgres")
        self._run(initdb, "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(f"port = {self.port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{self.root}'\n")
            conf.write("fsync = off\nshared_buffers = 16MB\nmax_connections = 40\n")

    def start(self) -> None:
        self._run(_bin("pg_ctl") or "pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-w", "start")

    def stop(self) -> None:
        self._run(_bin("pg_ctl") or "pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")


@pytest.fixture
def own_postgres() -> Iterator[OwnPostgres]:
    """A running PostgreSQL server of this test only (stopped and removed afterwards)."""
    root = Path(tempfile.mkdtemp(prefix="recovery-own-pg-"))
    os.chmod(root, 0o755)
    server = OwnPostgres(root)
    try:
        server.init()
        server.start()
    except (subprocess.CalledProcessError, OSError) as exc:
        shutil.rmtree(root, ignore_errors=True)
        require("an own PostgreSQL server (initdb/pg_ctl)", str(exc))
    try:
        yield server
    finally:
        try:
            server.stop()
        except (subprocess.CalledProcessError, OSError):
            pass
        shutil.rmtree(root, ignore_errors=True)
