"""Structured logs: component and context on every line, JSON or text, secrets masked; a real worker in JSON."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from app.infra.config import Settings, SettingsError
from app.infra.log_format import bind, configure, log_context


@pytest.fixture
def captured() -> Iterator[Callable[[str], io.StringIO]]:
    def install(fmt: str) -> io.StringIO:
        buffer = io.StringIO()
        handlers.append(configure(fmt=fmt, cluster="c1", stream=buffer))
        return buffer

    handlers: list[logging.Handler] = []
    level = logging.getLogger().level
    yield install
    for handler in handlers:
        logging.getLogger().removeHandler(handler)
    logging.getLogger().setLevel(level)


def test_json_lines_carry_component_context_and_no_secrets(captured: Callable[[str], io.StringIO]) -> None:
    buffer = captured("json")
    with log_context(component="controller", advice_id=7):
        bind(job_id=4242, attempt_index=1, generation=2)
        logging.getLogger("recovery.controller").warning("connecting to %s", "postgresql://app:s3cret@db/recovery")
    logging.getLogger("recovery.api").info("outside")
    first, second = (json.loads(line) for line in buffer.getvalue().splitlines()[:2])
    assert first["component"] == "controller" and first["cluster"] == "c1"
    assert (first["job_id"], first["attempt_index"], first["advice_id"], first["generation"]) == (4242, 1, 7, 2)
    assert "s3cret" not in buffer.getvalue() and "app:***@db" in first["message"]
    logging.getLogger("recovery.collector").warning("reading /shared/logs/example-crash-2151234567.log failed")
    assert "/shared/logs/example-crash-2151234567.log" in buffer.getvalue()  # only URLs are masked
    assert second["component"] == "api" and "job_id" not in second  # the context ended with its block


def test_text_lines_name_component_and_context(captured: Callable[[str], io.StringIO]) -> None:
    buffer = captured("text")
    with log_context(job_id=9):
        logging.getLogger("recovery.advisor").info("decided")
    line = buffer.getvalue().strip()
    assert " advisor: decided [cluster=c1 job_id=9]" in line


def test_log_format_setting() -> None:
    assert Settings.from_env({"RECOVERY_LOG_FORMAT": "JSON"}).log_format == "json"
    with pytest.raises(SettingsError):
        Settings.from_env({"RECOVERY_LOG_FORMAT": "xml"})


@pytest.mark.slow
def test_real_worker_writes_json_lines(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECOVERY_")}
    env.update(
        RECOVERY_DATA_DIR=str(tmp_path),
        RECOVERY_LOG_FORMAT="json",
        RECOVERY_CLUSTER="logs-test",
        RECOVERY_SLURM_BIN_DIR=str(tmp_path / "no-slurm"),  # every observer tick fails: it must say so in JSON
    )
    cli = [sys.executable, "-m", "app.cli"]
    subprocess.run([*cli, "db", "upgrade"], env=env, check=True, capture_output=True)
    log = tmp_path / "worker.log"
    with log.open("w") as out:
        proc = subprocess.Popen([*cli, "worker"], env=env, stderr=out, stdout=out)
    try:
        deadline = time.monotonic() + 60
        while '"component": "observer"' not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    assert lines and all(entry["component"] and entry["cluster"] == "logs-test" for entry in lines)
    assert {"worker", "observer"} <= {entry["component"] for entry in lines}


def test_libraries_info_lines_are_off_unless_verbose() -> None:
    from app.infra.log_format import configure

    quiet, loud = io.StringIO(), io.StringIO()
    configure(stream=quiet)
    logging.getLogger("watchfiles.main").info("1 change detected")
    logging.getLogger("recovery.demo").info("attempt 0 crashed")
    configure(stream=loud, verbose=True)
    logging.getLogger("watchfiles.main").info("1 change detected")
    configure()
    assert "attempt 0 crashed" in quiet.getvalue() and "change detected" not in quiet.getvalue()
    assert "change detected" in loud.getvalue()
