"""Hostile pushes to a running `recovery serve` get a clear 4xx and record nothing (both databases)."""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Iterator
from pathlib import Path

import cramjam
import httpx
import pytest

from app.infra.context import AppContext
from app.ingest import queries as ingest_queries
from tests.api.helpers import LiveServer, stop_server
from tests.ingest.helpers import SECRET, push_server
from tests.plugins.database import Database

AUTH = {"Authorization": f"Bearer {SECRET}"}


@pytest.fixture
def server(database: Database, ctx: AppContext, tmp_path: Path) -> Iterator[LiveServer]:
    live = push_server(database.url, tmp_path, ctx.settings.cluster, RECOVERY_PUSH_MAX_BODY_BYTES="65536")
    try:
        yield live
    finally:
        stop_server(live)


def loki_json(labels: dict[str, str], values: list[list[str]]) -> bytes:
    return json.dumps({"streams": [{"stream": labels, "values": values}]}).encode()


async def test_hostile_pushes_get_clear_4xx_and_nothing_is_recorded(ctx: AppContext, server: LiveServer) -> None:
    now = str(time.time_ns())
    loki, otlp = f"{server.url}/loki/api/v1/push", f"{server.url}/v1/logs"
    as_json = {**AUTH, "Content-Type": "application/json"}
    as_proto = {**AUTH, "Content-Type": "application/x-protobuf"}
    good = loki_json({"slurm_job_id": "9001"}, [[now, "iteration 1"]])
    cases = [
        (loki, {"Content-Type": "application/json"}, good, 401),
        (loki, {"Authorization": "Bearer wrong-secret-000000000", "Content-Type": "application/json"}, good, 401),
        (loki, as_proto, b"x" * 70000, 413),
        (loki, {**as_json, "Content-Encoding": "gzip"}, gzip.compress(b"[" * 1_000_000), 413),
        (loki, as_proto, bytes(cramjam.snappy.compress_raw(b"\x0a\xff\xff\xff")), 400),
        (loki, as_proto, b"not snappy at all", 400),
        (otlp, as_proto, b"\x0a\x05\x12\x03\x12\x01", 400),
        (loki, {**AUTH, "Content-Type": "text/plain"}, b"hello", 415),
        (loki, as_json, b'{"streams": [{"stream": {"a": "\xff"}, "values": []}]}', 400),
        (loki, as_json, loki_json({f"l{i}": "v" for i in range(500)}, [[now, "x"]]), 400),
        (loki, as_json, loki_json({"slurm_job_id": "9001"}, [[str(time.time_ns() + 10**13), "future"]]), 400),
        (loki, as_json, loki_json({"slurm_job_id": "9001"}, [["1000000000000000000", "2001"]]), 400),
        (otlp, as_json, b'{"resourceLogs": "nope"}', 400),
    ]
    async with httpx.AsyncClient(timeout=30) as http:
        for url, headers, body, status in cases:
            answer = await http.post(url, headers=headers, content=body)
            assert answer.status_code == status, (url, headers, body[:80], answer.text)
            assert "error" in answer.json()
    async with ctx.sessions() as session:
        assert (await ingest_queries.push_counts(session))["lines"] == 0
