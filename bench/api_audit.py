"""Audit-event API latency with 1,000,000 events: first and deep pages over HTTP vs the raw keyset SQL.

    .venv/bin/python bench/api_audit.py            # 1,000,000 events into a fresh PostgreSQL database
    .venv/bin/python bench/api_audit.py --smoke    # 20,000 events (CI)

Creates a scratch database on $RECOVERY_TEST_PG's server (default postgres@127.0.0.1:5432), fills it
with COPY, starts `recovery serve` (real uvicorn, dev auth on loopback) and times
`auditEvents(filter: {jobId})` first pages and a page after N pages of cursors, next to the same
keyset query run directly with asyncpg in the same run. Prints medians and ratios; no timed assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import asyncpg
import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.api.ids import from_global_id  # noqa: E402
from app.db import create_engine  # noqa: E402
from app.migrate import upgrade  # noqa: E402

PG_SERVER = os.environ.get("RECOVERY_TEST_PG", "postgresql+asyncpg://postgres@127.0.0.1:5432/test")
JOBS = 1000
QUERY = (ROOT / "graphql" / "operations" / "AuditEventsPage.graphql").read_text()
# The statement audit.service.query issues for a DESC page of one job (filter, keyset bound, limit n+1).
RAW_FIRST = "SELECT * FROM audit_events WHERE slurm_job_id = $1 ORDER BY produced_at DESC, id DESC LIMIT 101"
RAW_AFTER = (
    "SELECT * FROM audit_events WHERE slurm_job_id = $1 AND (produced_at, id) < ($2, $3) "
    "ORDER BY produced_at DESC, id DESC LIMIT 101"
)


def dsn(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


async def create_database() -> str:
    name = f"recovery_bench_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(dsn(PG_SERVER))
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    return PG_SERVER.rsplit("/", 1)[0] + "/" + name


async def drop_database(url: str) -> None:
    admin = await asyncpg.connect(dsn(PG_SERVER))
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)')
    finally:
        await admin.close()


async def fill(url: str, count: int) -> float:
    """Insert `count` events with COPY; returns seconds taken."""
    engine = create_engine(url)
    await upgrade(engine)
    await engine.dispose()
    base = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    started = time.perf_counter()
    conn = await asyncpg.connect(dsn(url))
    try:
        batch = 100_000
        for start in range(0, count, batch):
            rows = [
                (
                    "watcher" if n % 3 else "controller",
                    "anomaly.detected" if n % 3 else "scheduler.release",
                    "INFO",
                    f"event {n}",
                    "{}",
                    "bench",
                    100_000 + n % JOBS,
                    n % 4,
                    base + dt.timedelta(milliseconds=n),
                    base,
                )
                for n in range(start, min(start + batch, count))
            ]
            await conn.copy_records_to_table(
                "audit_events",
                records=rows,
                columns=[
                    "component",
                    "event_type",
                    "level",
                    "message",
                    "payload",
                    "cluster",
                    "slurm_job_id",
                    "attempt_index",
                    "produced_at",
                    "recorded_at",
                ],
            )
        await conn.execute("ANALYZE audit_events")
    finally:
        await conn.close()
    return time.perf_counter() - started


def start_server(url: str, tmp: str) -> tuple[subprocess.Popen[bytes], str]:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {
        **os.environ,
        "RECOVERY_DATABASE_URL": url,
        "RECOVERY_DEV_NO_AUTH": "true",
        "RECOVERY_BIND": f"127.0.0.1:{port}",
        "RECOVERY_DATA_DIR": tmp,
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                return process, base
        except httpx.TransportError:
            time.sleep(0.1)
    process.terminate()
    raise RuntimeError("recovery serve did not start")


async def time_http(http: httpx.AsyncClient, job_id: int | None, after: str | None, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        flt = {"jobId": job_id} if job_id is not None else {}
        response = await http.post(
            "/graphql", json={"query": QUERY, "variables": {"filter": flt, "first": 100, "after": after}}
        )
        response.raise_for_status()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


async def time_raw(conn: asyncpg.Connection, job_id: int, bound: tuple[dt.datetime, int] | None, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        if bound is None:
            await conn.fetch(RAW_FIRST, job_id)
        else:
            await conn.fetch(RAW_AFTER, job_id, *bound)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


async def walk_pages(http: httpx.AsyncClient, pages: int) -> tuple[str | None, tuple[dt.datetime, int] | None, int]:
    """Follow cursors over ALL events (no filter) for `pages` pages; the cursor and key reached."""
    after, last = None, None
    walked = 0
    for _ in range(pages):
        response = await http.post("/graphql", json={"query": QUERY, "variables": {"first": 100, "after": after}})
        page = response.json()["data"]["auditEvents"]
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]
        last = page["edges"][-1]["node"]
        walked += 1
    key = (dt.datetime.fromisoformat(last["producedAt"]), from_global_id(last["id"])[1]) if last else None
    return after, key, walked


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="20,000 events instead of 1,000,000")
    parser.add_argument("--events", type=int, default=None)
    parser.add_argument("--deep", type=int, default=500, help="pages to walk before timing a deep page")
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    count = args.events or (20_000 if args.smoke else 1_000_000)
    url = await create_database()
    process = None
    try:
        seconds = await fill(url, count)
        print(f"inserted {count:,} audit events with COPY in {seconds:.1f}s ({count / seconds:,.0f}/s)")
        with tempfile.TemporaryDirectory() as tmp:
            process, base = start_server(url, tmp)
            conn = await asyncpg.connect(dsn(url))
            async with httpx.AsyncClient(base_url=base, timeout=60) as http:
                job_id = 100_000 + 7
                await time_http(http, job_id, None, 3)  # warm up
                http_first = await time_http(http, job_id, None, args.repeats)
                raw_first = await time_raw(conn, job_id, None, args.repeats)
                http_top = await time_http(http, None, None, args.repeats)
                raw_top_samples = []
                for _ in range(args.repeats):
                    started = time.perf_counter()
                    await conn.fetch("SELECT * FROM audit_events ORDER BY produced_at DESC, id DESC LIMIT 101")
                    raw_top_samples.append(time.perf_counter() - started)
                raw_top = statistics.median(raw_top_samples) * 1000
                # A deep page of the whole table: walk `deep` pages with cursors, then time the next one.
                deep = min(args.deep, count // 100 - 1)
                cursor, key, walked = await walk_pages(http, deep)
                http_deep_samples = []
                for _ in range(args.repeats):
                    started = time.perf_counter()
                    (
                        await http.post("/graphql", json={"query": QUERY, "variables": {"first": 100, "after": cursor}})
                    ).raise_for_status()
                    http_deep_samples.append(time.perf_counter() - started)
                http_deep = statistics.median(http_deep_samples) * 1000
                raw_deep_samples = []
                for _ in range(args.repeats):
                    started = time.perf_counter()
                    await conn.fetch(
                        "SELECT * FROM audit_events WHERE (produced_at, id) < ($1, $2) ORDER BY "
                        "produced_at DESC, id DESC LIMIT 101",
                        *(key or (dt.datetime.now(dt.UTC), 2**62)),
                    )
                    raw_deep_samples.append(time.perf_counter() - started)
                raw_deep = statistics.median(raw_deep_samples) * 1000
            await conn.close()
        print(f"{'page':<38} {'HTTP GraphQL ms':>16} {'raw SQL ms':>11} {'ratio':>7}")
        print(
            f"{'first page, filter {jobId}':<38} {http_first:>16.2f} {raw_first:>11.2f} {http_first / raw_first:>7.1f}"
        )
        print(f"{'first page of all events':<38} {http_top:>16.2f} {raw_top:>11.2f} {http_top / raw_top:>7.1f}")
        print(
            f"{f'page {walked + 1} of all events (cursor)':<38} {http_deep:>16.2f} {raw_deep:>11.2f} "
            f"{http_deep / raw_deep:>7.1f}"
        )
        print(
            f"page {walked + 1} / page 1 of all events over HTTP: {http_deep / http_top:.2f} (keyset: "
            f"depth adds no cost)"
        )
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=10)
        await drop_database(url)


if __name__ == "__main__":
    asyncio.run(main())
