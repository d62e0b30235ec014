"""Secrets given as files (issue 22): RECOVERY_SESSION_SECRET_FILE signs the dashboard sessions of every replica
(real `recovery serve` processes, the real OIDC provider), the secret is not in any process environment, and a
file that cannot be used stops the start with a clear message instead of a random secret or a hang."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from app.infra.config import Settings, SettingsError
from app.infra.secret_files import MAX_SECRET_BYTES, SecretFileError, read_secret_file
from tests.api.helpers import ROOT, start_server, stop_server
from tests.hostile.helpers import dashboard_login
from tests.plugins.database import Database
from tests.plugins.oidc_provider import OidcProvider

SECRET = "s3cret-from-a-file-" + "x" * 40


@pytest.mark.oidc
@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_replicas_reading_one_secret_file_accept_each_others_sessions(
    oidc_provider: OidcProvider, database: Database, tmp_path: Path
) -> None:
    secret_file = tmp_path / "session-secret"
    secret_file.write_text(SECRET + "\n")  # as `echo "$SECRET" > file` writes it
    secret_file.chmod(0o600)
    env = {
        "RECOVERY_OIDC_ISSUER": oidc_provider.issuer,
        "RECOVERY_OIDC_AUDIENCE": oidc_provider.audience,
        "RECOVERY_OIDC_CLIENT_ID": oidc_provider.dashboard_client_id,
        "RECOVERY_SESSION_SECRET_FILE": str(secret_file),
    }
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    first = start_server(database.url, tmp_path / "one", **env)
    second = start_server(database.url, tmp_path / "two", **env)
    try:
        cookie = dashboard_login(first, oidc_provider, "operator-olga")
        for server in (first, second):
            with httpx.Client(base_url=server.url, timeout=20, follow_redirects=False) as client:
                client.cookies.set("recovery_dashboard", cookie)
                page = client.get("/dashboard/workflow")
                assert page.status_code == 200, (server.url, page.status_code, page.headers.get("location"))
            environ = Path(f"/proc/{server.process.pid}/environ").read_bytes()
            assert SECRET.encode() not in environ and str(secret_file).encode() in environ
    finally:
        stop_server(first)
        stop_server(second)


def _serve(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "RECOVERY_DATA_DIR": str(tmp_path), "RECOVERY_DEV_NO_AUTH": "true", **env}
    environment.pop("RECOVERY_SESSION_SECRET", None)
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "serve"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_secret_file_that_cannot_be_used_stops_the_start_with_a_clear_message(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # nobody writes: a blocking open would hang the start for ever
    empty = tmp_path / "empty"
    empty.write_text("\n")
    huge = tmp_path / "huge"
    huge.write_bytes(b"x" * (MAX_SECRET_BYTES + 1))
    cases = {
        str(tmp_path / "missing"): "cannot read",
        str(fifo): "not a regular file",
        str(empty): "is empty",
        str(huge): "larger than",
        str(tmp_path): "not a regular file",
    }
    for path, message in cases.items():
        done = _serve(tmp_path, RECOVERY_SESSION_SECRET_FILE=path)
        assert done.returncode == 2, (path, done.stdout, done.stderr)
        assert "RECOVERY_SESSION_SECRET_FILE" in done.stderr and message in done.stderr, (path, done.stderr)
        assert "Traceback" not in done.stderr
    good = tmp_path / "good"
    good.write_text(SECRET)
    both = _serve(tmp_path, RECOVERY_OIDC_CLIENT_SECRET="inline", RECOVERY_OIDC_CLIENT_SECRET_FILE=str(good))
    assert both.returncode == 2 and "are both set" in both.stderr, both.stderr


def test_the_reader_drops_the_trailing_newline_only(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_bytes(b"  two words \r\n")
    assert read_secret_file(str(path), "X") == "  two words "
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(SecretFileError, match="not UTF-8"):
        read_secret_file(str(path), "X")
    path.write_text("from-file\n")
    settings = Settings.build(data_dir=str(tmp_path), oidc_client_secret_file=str(path))
    assert settings.oidc_client_secret == "from-file"
    with pytest.raises(SettingsError, match="both set"):
        Settings.build(data_dir=str(tmp_path), session_secret="inline", session_secret_file=str(path))
