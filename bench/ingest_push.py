"""Pushed lines per second through each push endpoint vs the file path's reader on the same log, in one run.

The log is a real job's output (tests/fixtures/real-jobs/plain/ddp-raise.log) repeated with a line counter so
every line is new. The file figure is the collector's reader (LogTailer.read over the file: prefilter,
classification) alone; the push figures are the whole endpoint in this process (HTTP body, decode, identity
rows, the same reader, the evidence record, the commit) on an SQLite database, one core. So the ratio is
conservative: the file path's own database work is not in its figure. The figures are wall-clock rates; the
same rates per CPU second of the process are printed beside them, which a loaded machine changes less.

    python bench/ingest_push.py [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import cramjam
import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.infra.config import Settings  # noqa: E402
from app.infra.context import AppContext  # noqa: E402
from app.jobfiles.reader import FilePosition, LogTailer  # noqa: E402
from app.main import create_app  # noqa: E402
from bench.figures import figure  # noqa: E402

LOG = ROOT / "tests" / "fixtures" / "real-jobs" / "plain" / "ddp-raise.log"
SECRET = "bench-collector-secret-0123456789"


def lines_of(count: int) -> list[str]:
    base = LOG.read_text().splitlines()
    return [f"{base[i % len(base)]} #{i}" for i in range(count)]


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def loki_body(labels: str, entries: list[tuple[int, str]]) -> bytes:
    """A snappy-compressed logproto.PushRequest (what Loki clients send)."""
    stream = _field(1, labels.encode())
    for ns, line in entries:
        stamp = _varint(1 << 3) + _varint(ns // 10**9) + _varint(2 << 3) + _varint(ns % 10**9)
        stream += _field(2, _field(1, stamp) + _field(2, line.encode()))
    return bytes(cramjam.snappy.compress_raw(_field(1, stream)))


def otlp_body(resource: dict[str, str], entries: list[tuple[int, str]]) -> bytes:
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
    from opentelemetry.proto.resource.v1.resource_pb2 import Resource

    records = [LogRecord(time_unix_nano=ns, body=AnyValue(string_value=line)) for ns, line in entries]
    attrs = [KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in resource.items()]
    request = ExportLogsServiceRequest(
        resource_logs=[ResourceLogs(resource=Resource(attributes=attrs), scope_logs=[ScopeLogs(log_records=records)])]
    )
    return request.SerializeToString()


def file_rate(lines: list[str], directory: Path) -> tuple[float, float, float]:
    path = directory / "bench.log"
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes(data)
    tailer = LogTailer(traceback_wait=0.0)
    started, cpu = time.perf_counter(), time.process_time()
    position = FilePosition(path=str(path))
    while True:
        result = tailer.read(position)
        position = result.position
        if not result.more:
            break
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    return len(lines) / seconds, len(data) / seconds / 1e6, len(lines) / cpu


async def push_rate(protocol: str, lines: list[str], directory: Path, batch: int) -> tuple[float, float]:
    db = directory / f"{protocol}.db"
    secrets = directory / "secrets"
    secrets.write_text(f"bench {SECRET}\n")
    settings = Settings.build(
        database_url=f"sqlite+aiosqlite:///{db}",
        data_dir=str(directory),
        dev_no_auth=True,
        log_push=True,
        push_secrets_file=str(secrets),
        push_max_body_bytes=64 * 1024 * 1024,
    )
    from app.infra.migrate import upgrade

    ctx = AppContext.open(settings)
    await upgrade(ctx.engine)
    app = create_app(settings, ctx=ctx)
    headers = {"Authorization": f"Bearer {SECRET}", "Content-Type": "application/x-protobuf"}
    url = "/loki/api/v1/push" if protocol == "loki" else "/v1/logs"
    base = time.time_ns() - 60 * 10**9
    bodies = []
    for start in range(0, len(lines), batch):
        entries = [(base + i * 1000, lines[i]) for i in range(start, min(len(lines), start + batch))]
        if protocol == "loki":
            bodies.append(loki_body('{slurm_job_id="424242", node="n1"}', entries))
        else:
            bodies.append(otlp_body({"slurm.job.id": "424242", "host.name": "n1"}, entries))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as http:
        started, cpu = time.perf_counter(), time.process_time()
        for body in bodies:
            answer = await http.post(url, content=body, headers=headers)
            assert answer.status_code in (200, 204), answer.text
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    await ctx.engine.dispose()
    return len(lines) / seconds, len(lines) / cpu


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true", help="a small run (checks the bench works)")
    args = parser.parse_args()
    count = 5_000 if args.smoke else 100_000
    lines = lines_of(count)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        file_lines, file_mb, file_cpu = file_rate(lines, directory)
        loki, loki_cpu = await push_rate("loki", lines, directory, 1000)
        otlp, otlp_cpu = await push_rate("otlp", lines, directory, 1000)
    print(
        json.dumps({"lines": count, "file_lines_per_s": file_lines, "file_mb_per_s": file_mb, "cpus": os.cpu_count()})
    )
    print(f"loki push {loki:.0f} lines/s, otlp push {otlp:.0f} lines/s, file reader {file_lines:.0f} lines/s")
    # per CPU second of this process (the aiosqlite thread included): what a loaded machine changes least
    print(
        f"per CPU second: loki {loki_cpu:.0f}, otlp {otlp_cpu:.0f}, file reader {file_cpu:.0f} lines "
        f"(loki {loki_cpu / file_cpu:.3f}x, otlp {otlp_cpu / file_cpu:.3f}x)"
    )
    figure("push_loki_vs_file_lines", loki / file_lines, "x", ">=", 0.5)
    figure("push_otlp_vs_file_lines", otlp / file_lines, "x", ">=", 0.5)
    figure("push_loki_lines_per_s", loki, "lines/s", ">=", 20000)


if __name__ == "__main__":
    asyncio.run(main())
