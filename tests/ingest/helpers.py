"""Helpers of the push tests: a `recovery serve` that takes pushes, and the real clients of both protocols."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource

from tests.api.helpers import LiveServer, start_server

ROOT = Path(__file__).resolve().parents[2]
JS = ROOT / "tests" / "js"
REAL_JOBS = ROOT / "tests" / "fixtures" / "real-jobs" / "plain"
SECRET = "collector-a-secret-0123456789"


def push_server(database_url: str, tmp_path: Path, cluster: str, **env: str) -> LiveServer:
    """`recovery serve` taking pushes for `cluster`, with one collector secret (`collector-a`)."""
    secrets = tmp_path / "push-secrets"
    secrets.write_text(f"# name secret\ncollector-a {SECRET}\n")
    secrets.chmod(0o600)
    return start_server(
        database_url,
        tmp_path,
        RECOVERY_DEV_NO_AUTH="true",
        RECOVERY_CLUSTER=cluster,
        RECOVERY_LOG_PUSH="true",
        RECOVERY_PUSH_SECRETS_FILE=str(secrets),
        **env,
    )


def real_lines(name: str, *, until: str | None = None) -> list[str]:
    """Lines a real job printed (tests/fixtures/real-jobs), up to the first line containing `until`."""
    lines = (REAL_JOBS / name).read_text().splitlines()
    if until is not None:
        lines = lines[: next(i for i, line in enumerate(lines) if until in line)]
    return lines


def otel_records(
    lines: Sequence[str], resource: dict[str, str], *, at: dt.datetime | None = None, observed_only: bool = False
) -> list[Any]:
    """The OpenTelemetry SDK's log records of `lines`, emitted through its Logs API as an instrumented program does.

    `at`: the records' time (else the SDK stamps them now); `observed_only`: no record time, only the observed
    one (what the Collector's filelog receiver sends without a timestamp parser).
    """
    memory = InMemoryLogRecordExporter()
    provider = LoggerProvider(resource=Resource.create(resource))
    provider.add_log_record_processor(SimpleLogRecordProcessor(memory))
    logger = provider.get_logger("recovery-push-test")
    base = time.time_ns() if at is None else int(at.timestamp() * 1e9)
    for index, line in enumerate(lines):
        stamp = base + index * 1000
        if observed_only:
            logger.emit(observed_timestamp=stamp, body=line, severity_number=SeverityNumber.INFO)
        else:
            logger.emit(timestamp=stamp, observed_timestamp=stamp, body=line, severity_number=SeverityNumber.INFO)
    provider.shutdown()
    return list(memory.get_finished_logs())


def otel_export(server: LiveServer, records: Sequence[Any], *, secret: str = SECRET, gzip: bool = False) -> bool:
    """Export records with the SDK's OTLP/HTTP exporter (protobuf); True when the service acknowledged them."""
    exporter = OTLPLogExporter(
        endpoint=f"{server.url}/v1/logs",
        headers={"Authorization": f"Bearer {secret}"},
        compression=Compression.Gzip if gzip else Compression.NoCompression,
        timeout=20,
    )
    try:
        result = exporter.export(list(records))
    finally:
        exporter.shutdown()
    return result.name == "SUCCESS"


def loki_push(
    server: LiveServer,
    entries: Sequence[tuple[dt.datetime, str]],
    labels: dict[str, str],
    *,
    json_body: bool = False,
    basic_auth: str = f"collector-a:{SECRET}",
) -> dict[str, Any]:
    """Push timed lines with winston-loki (protobuf + snappy unless `json_body`), a real Loki client library."""
    payload = {
        "url": server.url,
        "basicAuth": basic_auth,
        "labels": labels,
        "json": json_body,
        "entries": [{"ts": at.isoformat(), "line": line} for at, line in entries],
    }
    done = subprocess.run(
        ["node", str(JS / "loki_push.mjs")],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        cwd=JS,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])
