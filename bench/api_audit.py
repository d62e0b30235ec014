"""Audit-event API latency with 1,000,000 events: GraphQL and REST pages over HTTP against the framework's floor.

    .venv/bin/python bench/api_audit.py            # 1,000,000 events into a fresh PostgreSQL database
    .venv/bin/python bench/api_audit.py --smoke    # 20,000 events (CI)

Creates a scratch database on $RECOVERY_TEST_PG's server (default postgres@127.0.0.1:5432), fills it
with COPY, starts `recovery serve` (real uvicorn, dev auth on loopback) and times the first page of
100 events of one job (`auditEvents(filter: {jobId})` and `GET /v1/audit/events?jobId=`) and a page
after N pages of cursors. The floor, measured in the same run: a minimal Starlette JSON route under
the same uvicorn that runs the same keyset query with the same driver (asyncpg, a pool) and returns
the rows as JSON. Also the raw keyset SQL alone. A second `recovery serve` with RECOVERY_FAST_PATHS=off answers
the same first pages in the same turns, so the GraphQL executor's fast path (app/api/execution.py) is measured
against graphql-core's own execution in the same run (latency and server CPU per request; docs/fast-paths.md).
Prints medians and ratios, then `figure` lines; no timed assertions.
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
from pathlib import Path
from typing import Any

import asyncpg
import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.api.ids import from_global_id  # noqa: E402
from app.infra.db import create_engine  # noqa: E402
from app.infra.migrate import upgrade  # noqa: E402
from bench.figures import figure  # noqa: E402
from bench.scratch_db import dsn, scratch_postgres  # noqa: E402

JOBS = 1000
QUERY = (ROOT / "graphql" / "operations" / "AuditEventsPage.graphql").read_text()
# The statement audit.service.query issues for a DESC page of one job (filter, keyset bound, limit n+1).
RAW_FIRST = "SELECT * FROM audit_events WHERE slurm_job_id = $1 ORDER BY produced_at DESC, id DESC LIMIT 101"
RAW_AFTER = (
    "SELECT * FROM audit_events WHERE slurm_job_id = $1 AND (produced_at, id) < ($2, $3) "
    "ORDER BY produced_at DESC, id DESC LIMIT 101"
)


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


FLOOR_COLUMNS = (
    "id, component, event_type, level, message, payload, cluster, slurm_job_id, attempt_index, actor, "
    "produced_at, recorded_at"
)


def floor_app(url: str) -> object:
    """The framework's floor: one Starlette JSON route running the first-page keyset query on an asyncpg pool."""
    import contextlib
    import json

    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    pool: list[asyncpg.Pool] = []
    statement = (
        f"SELECT {FLOOR_COLUMNS} FROM audit_events WHERE slurm_job_id = $1 ORDER BY produced_at DESC, id DESC LIMIT $2"
    )

    async def events(request: Request) -> JSONResponse:
        limit = int(request.query_params.get("limit", "100"))
        async with pool[0].acquire() as conn:
            rows = await conn.fetch(statement, int(request.query_params["jobId"]), limit + 1)
        return JSONResponse(
            {
                "events": [
                    {
                        "id": r["id"],
                        "component": r["component"],
                        "eventType": r["event_type"],
                        "level": r["level"],
                        "message": r["message"],
                        "payload": json.loads(r["payload"]) if isinstance(r["payload"], str) else r["payload"],
                        "cluster": r["cluster"],
                        "jobId": r["slurm_job_id"],
                        "attemptIndex": r["attempt_index"],
                        "actor": r["actor"],
                        "producedAt": r["produced_at"].isoformat(),
                        "recordedAt": r["recorded_at"].isoformat(),
                    }
                    for r in rows[:limit]
                ],
                "more": len(rows) > limit,
            }
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        pool.append(await asyncpg.create_pool(dsn(url), min_size=1, max_size=4))
        yield
        await pool[0].close()

    return Starlette(routes=[Route("/events", events)], lifespan=lifespan)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_up(process: subprocess.Popen[bytes], probe: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(probe, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    process.terminate()
    raise RuntimeError(f"{probe} did not answer")


def start(
    argv: list[str], port: int, probe: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """A server process on loopback `port`, once `probe` answers 200; the process and its base URL."""
    process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    wait_up(process, base + probe)
    return process, base


def start_floor(url: str) -> tuple[subprocess.Popen[bytes], str]:
    """The floor app under uvicorn (same server, same log level as `recovery serve`), in its own process."""
    port = free_port()
    return start([sys.executable, __file__, "--serve-floor", url, "--port", str(port)], port, "/events?jobId=1&limit=1")


async def serve_floor(url: str, port: int) -> None:
    import uvicorn

    app: Any = floor_app(url)
    await uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="info", lifespan="on")).serve()


def start_server(url: str, tmp: str, fast_paths: str = "on") -> tuple[subprocess.Popen[bytes], str]:
    """`recovery serve` (real uvicorn, dev auth on loopback) with RECOVERY_FAST_PATHS=`fast_paths`."""
    port = free_port()
    env = {
        **os.environ,
        "RECOVERY_FAST_PATHS": fast_paths,
        "RECOVERY_DATABASE_URL": url,
        "RECOVERY_DEV_NO_AUTH": "true",
        "RECOVERY_BIND": f"127.0.0.1:{port}",
        "RECOVERY_DATA_DIR": tmp,
    }
    return start([sys.executable, "-m", "app.cli", "serve"], port, "/healthz", env)


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


async def interleaved(
    servers: list[httpx.AsyncClient], floor: httpx.AsyncClient, job_id: int, repeats: int
) -> tuple[list[float], list[float], float]:
    """Median ms of the GraphQL and REST first page of one job on each server, and of the floor's, timed in turns
    (shared-machine noise)."""
    graphql: list[list[float]] = [[] for _ in servers]
    rest: list[list[float]] = [[] for _ in servers]
    floor_samples: list[float] = []
    variables = {"filter": {"jobId": job_id}, "first": 100, "after": None}
    for _ in range(repeats):
        for http, graphql_samples, rest_samples in zip(servers, graphql, rest, strict=True):
            started = time.perf_counter()
            (await http.post("/graphql", json={"query": QUERY, "variables": variables})).raise_for_status()
            graphql_samples.append(time.perf_counter() - started)
            started = time.perf_counter()
            (await http.get("/v1/audit/events", params={"jobId": job_id, "limit": 100})).raise_for_status()
            rest_samples.append(time.perf_counter() - started)
        started = time.perf_counter()
        (await floor.get("/events", params={"jobId": job_id, "limit": 100})).raise_for_status()
        floor_samples.append(time.perf_counter() - started)
    medians = [[statistics.median(x) * 1000 for x in samples] for samples in (graphql, rest)]
    return medians[0], medians[1], statistics.median(floor_samples) * 1000


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def cpu_per_request(pid: int, call: Any, repeats: int) -> float:
    """Server CPU ms per request: unlike latency, it does not depend on what else the machine runs."""
    before = cpu_seconds(pid)
    for _ in range(repeats):
        (await call()).raise_for_status()
    return (cpu_seconds(pid) - before) / repeats * 1000


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="20,000 events instead of 1,000,000")
    parser.add_argument("--events", type=int, default=None)
    parser.add_argument("--deep", type=int, default=500, help="pages to walk before timing a deep page")
    parser.add_argument("--repeats", type=int, default=None, help="samples per figure (100; smoke 30)")
    parser.add_argument("--serve-floor", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_floor:
        await serve_floor(args.serve_floor, args.port)
        return
    count = args.events or (20_000 if args.smoke else 1_000_000)
    repeats = args.repeats or (30 if args.smoke else 100)
    async with scratch_postgres() as url:
        processes: list[subprocess.Popen[bytes]] = []
        try:
            seconds = await fill(url, count)
            print(f"inserted {count:,} audit events with COPY in {seconds:.1f}s ({count / seconds:,.0f}/s)")
            with tempfile.TemporaryDirectory() as tmp:
                process, base = start_server(url, tmp)
                processes.append(process)
                floor_process, floor_base = start_floor(url)
                processes.append(floor_process)
                off_process, off_base = start_server(url, tmp, fast_paths="off")
                processes.append(off_process)
                conn = await asyncpg.connect(dsn(url))
                async with (
                    httpx.AsyncClient(base_url=base, timeout=60) as http,
                    httpx.AsyncClient(base_url=off_base, timeout=60) as http_off,
                    httpx.AsyncClient(base_url=floor_base, timeout=60) as floor,
                ):
                    job_id = 100_000 + 7
                    servers = [http, http_off]
                    await interleaved(servers, floor, job_id, 5)  # warm up
                    graphql_ms, rest_ms, floor_first = await interleaved(servers, floor, job_id, repeats)
                    (http_first, http_first_off), (rest_first, rest_first_off) = graphql_ms, rest_ms
                    raw_first = await time_raw(conn, job_id, None, repeats)
                    cpu_repeats = max(repeats, 200)
                    first_page = {"filter": {"jobId": job_id}, "first": 100, "after": None}
                    cpu: dict[tuple[str, str], float] = {}
                    for _ in range(3):  # in turns, the smallest of three (CPU time only grows with interference)
                        for mode, server, client in (
                            ("on", process, http),
                            ("off", off_process, http_off),
                        ):
                            for kind, call in (
                                (
                                    "graphql",
                                    lambda c=client: c.post("/graphql", json={"query": QUERY, "variables": first_page}),
                                ),
                                (
                                    "rest",
                                    lambda c=client: c.get("/v1/audit/events", params={"jobId": job_id, "limit": 100}),
                                ),
                            ):
                                spent = await cpu_per_request(server.pid, call, cpu_repeats)
                                cpu[kind, mode] = min(cpu.get((kind, mode), spent), spent)
                    cpu_graphql, cpu_rest = cpu["graphql", "on"], cpu["rest", "on"]
                    cpu_floor = await cpu_per_request(
                        floor_process.pid,
                        lambda: floor.get("/events", params={"jobId": job_id, "limit": 100}),
                        cpu_repeats,
                    )
                    raw_top_samples = []
                    for _ in range(repeats):
                        started = time.perf_counter()
                        await conn.fetch("SELECT * FROM audit_events ORDER BY produced_at DESC, id DESC LIMIT 101")
                        raw_top_samples.append(time.perf_counter() - started)
                    raw_top = statistics.median(raw_top_samples) * 1000
                    # A deep page of the whole table: walk `deep` pages with cursors, then time it and the first page
                    # of the same list in turns.
                    deep = min(args.deep, count // 100 - 1)
                    cursor, key, walked = await walk_pages(http, deep)
                    http_top_samples: list[float] = []
                    http_deep_samples: list[float] = []
                    for _ in range(repeats):
                        for after, samples in ((None, http_top_samples), (cursor, http_deep_samples)):
                            started = time.perf_counter()
                            (
                                await http.post(
                                    "/graphql", json={"query": QUERY, "variables": {"first": 100, "after": after}}
                                )
                            ).raise_for_status()
                            samples.append(time.perf_counter() - started)
                    http_top = statistics.median(http_top_samples) * 1000
                    http_deep = statistics.median(http_deep_samples) * 1000
                    raw_deep_samples = []
                    for _ in range(repeats):
                        started = time.perf_counter()
                        await conn.fetch(
                            "SELECT * FROM audit_events WHERE (produced_at, id) < ($1, $2) ORDER BY "
                            "produced_at DESC, id DESC LIMIT 101",
                            *(key or (dt.datetime.now(dt.UTC), 2**62)),
                        )
                        raw_deep_samples.append(time.perf_counter() - started)
                    raw_deep = statistics.median(raw_deep_samples) * 1000
                await conn.close()
            print(f"first page of 100 events of one job (median of {repeats}, timed in turns):")
            print(
                f"  {'GraphQL auditEvents(filter: {jobId})':<44} {http_first:8.2f} ms  "
                f"{http_first / floor_first:5.2f}x floor"
            )
            print(
                f"  {'REST GET /v1/audit/events?jobId=':<44} {rest_first:8.2f} ms  "
                f"{rest_first / floor_first:5.2f}x floor"
            )
            print(
                f"  {'GraphQL, RECOVERY_FAST_PATHS=off':<44} {http_first_off:8.2f} ms  "
                f"{http_first_off / floor_first:5.2f}x floor"
            )
            print(
                f"  {'REST, RECOVERY_FAST_PATHS=off':<44} {rest_first_off:8.2f} ms  "
                f"{rest_first_off / floor_first:5.2f}x floor"
            )
            print(f"  {'floor: Starlette route + asyncpg + JSON':<44} {floor_first:8.2f} ms")
            print(f"  {'raw keyset SQL (asyncpg, no HTTP)':<44} {raw_first:8.2f} ms")
            print(
                f"server CPU per request (load-independent): GraphQL {cpu_graphql:.2f} ms "
                f"({cpu_graphql / cpu_floor:.2f}x), "
                f"REST {cpu_rest:.2f} ms ({cpu_rest / cpu_floor:.2f}x), floor {cpu_floor:.2f} ms"
            )
            print(
                f"server CPU per request with RECOVERY_FAST_PATHS=off: GraphQL {cpu['graphql', 'off']:.2f} ms, "
                f"REST {cpu['rest', 'off']:.2f} ms (no fast path serves REST)"
            )
            print(f"{'page':<38} {'HTTP GraphQL ms':>16} {'raw SQL ms':>11} {'ratio':>7}")
            print(f"{'first page of all events':<38} {http_top:>16.2f} {raw_top:>11.2f} {http_top / raw_top:>7.1f}")
            print(
                f"{f'page {walked + 1} of all events (cursor)':<38} {http_deep:>16.2f} {raw_deep:>11.2f} "
                f"{http_deep / raw_deep:>7.1f}"
            )
            print(
                f"page {walked + 1} / page 1 of all events over HTTP: {http_deep / http_top:.2f} (keyset: "
                f"depth adds no cost)"
            )
            figure("graphql_first_page_vs_floor", http_first / floor_first, "x", "<=", 2)
            figure("rest_first_page_vs_floor", rest_first / floor_first, "x", "<=", 1.3)
            figure("graphql_deep_page_vs_first_page", http_deep / http_top, "x", "<=", 1.1)
            # What the executor's fast path saves of its figure (GraphQL first page vs floor) against graphql-core's
            # own execution (docs/fast-paths.md: a fast path is kept at 20 % or more).
            figure("graphql_executor_fast_path_saved", 100 * (1 - http_first / http_first_off), "%", ">=", 20)
        finally:
            for process in processes:
                process.terminate()
                process.wait(timeout=10)


if __name__ == "__main__":
    asyncio.run(main())
