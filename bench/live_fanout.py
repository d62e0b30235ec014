"""1,000 live viewers on one `recovery serve` process while a writer records 50 changes a second.

Usage: .venv/bin/python bench/live_fanout.py [--subscribers 1000] [--rate 50] [--seconds 20] [--smoke]

Starts one real `recovery serve` (a subprocess, its own scratch PostgreSQL database on $RECOVERY_TEST_PG's
server, else SQLite) holding --subscribers live subscriptions from this process, half of them GraphQL
`attemptUpdates(workflowId:)` over WebSocket (graphql-transport-ws, one connection each, spread over 200
workflows) and half dashboard server-sent-event streams (`/dashboard/live`: a quarter `view=overview`, a
quarter `view=workflow`). Another process, the writer, changes one attempt per 1/rate seconds (one
transaction each, through app.jobs.service as the worker does) and logs when each change committed.
Measured: change committed → delivered to each subscriber that should see it (an SSE stream's "changed"
event delivers every entry up to its position), p50/p99 over every (entry, subscriber) pair; entries never
delivered (dropped) or delivered out of order or twice (reordered); the server's resident memory per
subscriber (after minus before the subscribers connected). Ends with one `figure` line per goal (issue 28,
item 4). No timing is asserted anywhere.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from sqlalchemy import select  # noqa: E402

from app.api.ids import to_global_id  # noqa: E402
from app.feed import queries as feed_queries  # noqa: E402
from app.feed.models import ChangeFeedEntry  # noqa: E402
from app.infra.config import Settings  # noqa: E402
from app.infra.context import AppContext  # noqa: E402
from app.infra.migrate import upgrade  # noqa: E402
from app.jobs import service as jobs  # noqa: E402
from app.jobs.models import Attempt  # noqa: E402
from bench.figures import figure  # noqa: E402
from bench.observer_tick import StaticScheduler, build_snapshot  # noqa: E402
from bench.scratch_db import reachable, scratch_postgres  # noqa: E402
from worker.observer import Observer  # noqa: E402

CLUSTER = "bench"
WORKFLOWS = 200
OVERVIEW_TOPICS = frozenset({"workflow", "attempt", "job", "advice", "anomaly"})
WORKFLOW_TOPICS = frozenset({"workflow", "attempt", "job", "advice", "anomaly", "checkpoint"})
SUBSCRIBE = (
    "subscription Live($workflowId: ID!) { attemptUpdates(workflowId: $workflowId) "
    "{ position state changed attempt { id state nodes } } }"
)


@dataclass
class Viewer:
    """One subscription: what it should see and when each position arrived."""

    kind: str  # "ws", "sse-overview", "sse-workflow"
    workflow_pk: int | None
    received: list[tuple[int, float]] = field(default_factory=list)
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    def wants(self, topic: str, workflow_id: int | None) -> bool:
        if self.kind == "ws":
            return topic == "attempt" and workflow_id == self.workflow_pk
        if self.kind == "sse-overview":
            return topic in OVERVIEW_TOPICS
        return topic in WORKFLOW_TOPICS and workflow_id == self.workflow_pk


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def resident_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def seed(url: str) -> tuple[AppContext, dict[int, int]]:
    """Jobs of WORKFLOWS workflows registered by the observer (as the worker registers them); attempt → workflow."""
    settings = Settings.build(database_url=url, data_dir=tempfile.gettempdir(), environment="bench", cluster=CLUSTER)
    ctx = AppContext.open(settings)
    await upgrade(ctx.engine)
    document = build_snapshot(WORKFLOWS * 2, WORKFLOWS * 2)
    await Observer(ctx, StaticScheduler(json.dumps(document).encode())).tick()  # type: ignore[arg-type]
    async with ctx.sessions() as session:
        rows = (await session.execute(select(Attempt.id, Attempt.job_id))).all()
        from app.jobs.models import Job

        jobs_wf = dict((await session.execute(select(Job.id, Job.workflow_id))).all())
    return ctx, {attempt_id: int(jobs_wf[job_id] or 0) for attempt_id, job_id in rows}


async def write(url: str, rate: float, seconds: float) -> None:
    """The writer process: one attempt change per 1/rate s, each in its own transaction; prints `position time`."""
    settings = Settings.build(database_url=url, data_dir=tempfile.gettempdir(), environment="bench", cluster=CLUSTER)
    ctx = AppContext.open(settings)
    async with ctx.sessions() as session:
        attempt_ids = list((await session.scalars(select(Attempt.id).order_by(Attempt.id))).all())
    started = time.perf_counter()
    n = 0
    while (due := started + n / rate) < started + seconds:
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        async with ctx.sessions() as session, session.begin():
            attempt = await session.get(Attempt, attempt_ids[(n * 7) % len(attempt_ids)])
            assert attempt is not None
            await jobs.update_attempt(session, attempt=attempt, nodes=f"gpu[{n % 1000:03d}-{n % 1000 + 7:03d}]")
        committed = time.time()
        async with ctx.sessions() as session:
            position = await feed_queries.latest_id(session)
        print(f"{position} {committed:.6f}", flush=True)
        n += 1
    await ctx.close()


@contextlib.asynccontextmanager
async def server(url: str, port: int, subscribers: int) -> AsyncIterator[subprocess.Popen[bytes]]:
    """`recovery serve` on the database, without authentication (loopback), as many streams per principal as needed."""
    tmp = tempfile.mkdtemp(prefix="live-fanout-")
    env = {
        **os.environ,
        "RECOVERY_DATABASE_URL": url,
        "RECOVERY_DATA_DIR": tmp,
        "RECOVERY_BIND": f"127.0.0.1:{port}",
        "RECOVERY_CLUSTER": CLUSTER,
        "RECOVERY_DEV_NO_AUTH": "true",
        "RECOVERY_LIVE_STREAMS_PER_PRINCIPAL": str(subscribers),
        "RECOVERY_LOG_LEVEL": "WARNING",
    }
    log = open(Path(tmp) / "serve.log", "wb")  # noqa: SIM115
    process = subprocess.Popen([sys.executable, "-m", "app.cli", "serve"], cwd=ROOT, env=env, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 120
        async with httpx.AsyncClient() as client:
            while True:
                with contextlib.suppress(httpx.TransportError):
                    if (await client.get(f"http://127.0.0.1:{port}/healthz", timeout=2)).status_code == 200:
                        break
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("recovery serve did not start: " + (Path(tmp) / "serve.log").read_text()[-2000:])
                await asyncio.sleep(0.2)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


async def ws_viewer(port: int, viewer: Viewer, stop: asyncio.Event) -> None:
    """graphql-transport-ws: connection_init, one subscription; records each update's position on arrival."""
    from websockets.asyncio.client import connect

    async with connect(
        f"ws://127.0.0.1:{port}/graphql",
        subprotocols=[cast(Any, "graphql-transport-ws")],
        max_queue=None,
        open_timeout=120,
    ) as ws:
        await ws.send(json.dumps({"type": "connection_init", "payload": {}}))
        ack = json.loads(await ws.recv())
        assert ack["type"] == "connection_ack", ack
        variables = {"workflowId": to_global_id("Workflow", viewer.workflow_pk or 0)}
        await ws.send(
            json.dumps({"id": "1", "type": "subscribe", "payload": {"query": SUBSCRIBE, "variables": variables}})
        )
        viewer.ready.set()
        receiving = asyncio.ensure_future(_ws_receive(ws, viewer))
        await stop.wait()
        receiving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await receiving


async def _ws_receive(ws: Any, viewer: Viewer) -> None:
    async for raw in ws:
        now = time.time()
        message = json.loads(raw)
        if message.get("type") == "next":
            update = message["payload"]["data"]["attemptUpdates"]
            viewer.received.append((int(update["position"]), now))
        elif message.get("type") == "ping":
            await ws.send(json.dumps({"type": "pong"}))
        elif message.get("type") in ("error", "complete"):
            raise RuntimeError(f"subscription ended: {message}")


async def sse_viewer(port: int, viewer: Viewer, stop: asyncio.Event) -> None:
    """A plain HTTP/1.1 event-stream reader (no client library in the way): records each "changed" position."""
    query = "view=overview" if viewer.kind == "sse-overview" else f"view=workflow&workflow={viewer.workflow_pk}"
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    writer.write(
        f"GET /dashboard/live?{query} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    status = await reader.readline()
    if b" 200 " not in status:
        raise RuntimeError(f"event stream refused: {status!r} {(await reader.read(500))!r}")
    chunked = False
    while (line := await reader.readline()) not in (b"\r\n", b""):
        chunked |= line.lower().startswith(b"transfer-encoding: chunked")
    reading = asyncio.ensure_future(_sse_receive(reader, viewer, chunked))
    await stop.wait()
    reading.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await reading
    writer.close()


async def _sse_receive(reader: asyncio.StreamReader, viewer: Viewer, chunked: bool) -> None:
    buffer = b""
    while True:
        if chunked:
            size = int((await reader.readline()).strip() or b"0", 16)
            data = await reader.readexactly(size + 2)
            buffer += data[:-2]
        else:
            buffer += await reader.read(65536)
        now = time.time()
        while b"\r\n\r\n" in buffer or b"\n\n" in buffer:
            sep = b"\r\n\r\n" if b"\r\n\r\n" in buffer else b"\n\n"
            event, buffer = buffer.split(sep, 1)
            fields = dict(
                line.split(":", 1) for line in event.decode().replace("\r", "").split("\n") if ":" in line[1:]
            )
            name = fields.get("event", "").strip()
            if name == "ready":
                viewer.ready.set()
            elif name == "changed":
                viewer.received.append((int(fields["id"].strip()), now))


async def measure(args: argparse.Namespace, url: str) -> list[tuple[str, float, str, str, float]]:
    ctx, workflow_of_attempt = await seed(url)
    async with ctx.sessions() as session:
        start_position = await feed_queries.latest_id(session)
    workflows = sorted(set(workflow_of_attempt.values()))
    port = free_port()
    viewers: list[Viewer] = []
    for i in range(args.subscribers):
        kind = "ws" if i % 2 == 0 else ("sse-overview" if i % 4 == 1 else "sse-workflow")
        viewers.append(Viewer(kind, None if kind == "sse-overview" else workflows[(i // 2) % len(workflows)]))
    counts = {k: sum(v.kind == k for v in viewers) for k in ("ws", "sse-overview", "sse-workflow")}
    print(f"database: {ctx.engine.dialect.name}; {len(workflows)} workflows, {len(workflow_of_attempt)} attempts")
    print(
        f"subscribers: {args.subscribers} ({counts['ws']} WebSocket attemptUpdates(workflowId), "
        f"{counts['sse-overview']} SSE overview, {counts['sse-workflow']} SSE workflow)"
    )
    async with server(url, port, args.subscribers) as process:
        rss_before = resident_kb(process.pid)
        stop = asyncio.Event()
        tasks = []
        t0 = time.perf_counter()
        for n, viewer in enumerate(viewers):
            client = ws_viewer if viewer.kind == "ws" else sse_viewer
            tasks.append(asyncio.ensure_future(client(port, viewer, stop)))
            if n % 50 == 49:
                await asyncio.sleep(0.05)  # connect in waves, as viewers arrive
        deadline = time.monotonic() + 300
        while not all(v.ready.is_set() for v in viewers):
            failed = [t for t in tasks if t.done() and t.exception() is not None]
            if failed:
                raise RuntimeError(f"{len(failed)} subscribers failed: {failed[0].exception()!r}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {sum(v.ready.is_set() for v in viewers)} subscribers ready after 300 s")
            await asyncio.sleep(0.2)
        await asyncio.sleep(2)  # subscriptions started reading (the last ones' first read)
        rss_after = resident_kb(process.pid)
        print(f"{args.subscribers} subscribers connected in {time.perf_counter() - t0:.1f} s")
        per_subscriber_kb = (rss_after - rss_before) / args.subscribers
        print(
            f"server resident memory: {rss_before / 1024:.0f} MB idle, {rss_after / 1024:.0f} MB with "
            f"{args.subscribers} subscribers: {per_subscriber_kb:.0f} KB per subscriber"
        )

        server_cpu, client_cpu, wall = cpu_seconds(process.pid), time.process_time(), time.monotonic()
        writer = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "--write",
            url,
            "--rate",
            str(args.rate),
            "--seconds",
            str(args.seconds),
            stdout=asyncio.subprocess.PIPE,
        )
        assert writer.stdout is not None
        commits: list[tuple[int, float]] = []
        while line := await writer.stdout.readline():
            raw_position, raw_at = line.split()
            commits.append((int(raw_position), float(raw_at)))
        await writer.wait()
        wall = time.monotonic() - wall
        server_cpu, client_cpu = cpu_seconds(process.pid) - server_cpu, time.process_time() - client_cpu
        print(
            f"CPU while writing ({wall:.1f} s): server {server_cpu:.1f} s ({100 * server_cpu / wall:.0f}%), "
            f"this process's {args.subscribers} clients {client_cpu:.1f} s ({100 * client_cpu / wall:.0f}%); "
            f"load average {os.getloadavg()[0]:.1f}"
        )
        end_position = commits[-1][0] if commits else start_position
        last_commit = commits[-1][1] if commits else time.time()
        # Let the last changes arrive (every subscriber has until 10 s after the last commit).
        deadline = time.time() + 10
        while time.time() < deadline and not all(
            v.received and v.received[-1][0] >= end_position for v in viewers if v.kind == "sse-overview"
        ):
            await asyncio.sleep(0.2)
        await asyncio.sleep(1)
        rss_end = resident_kb(process.pid)
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
    rate = len(commits) / max(1e-9, last_commit - commits[0][1]) if len(commits) > 1 else 0.0
    print(f"writer: {len(commits)} changes in {args.seconds} s ({rate:.1f}/s), feed {start_position} → {end_position}")
    print(f"server resident memory at the end: {rss_end / 1024:.0f} MB")

    async with ctx.sessions() as session:
        entries = (
            await session.execute(
                select(ChangeFeedEntry.id, ChangeFeedEntry.topic, ChangeFeedEntry.workflow_id)
                .where(ChangeFeedEntry.id > start_position, ChangeFeedEntry.id <= end_position)
                .order_by(ChangeFeedEntry.id)
            )
        ).all()
    await ctx.close()
    committed_at: dict[int, float] = {}
    previous = start_position
    for position, at in commits:
        for entry_id in range(previous + 1, position + 1):
            committed_at[entry_id] = at
        previous = max(previous, position)

    latencies: dict[str, list[float]] = {"ws": [], "sse-overview": [], "sse-workflow": []}
    dropped = reordered = 0
    for viewer in viewers:
        positions = [p for p, _ in viewer.received]
        reordered += sum(1 for a, b in zip(positions, positions[1:], strict=False) if b <= a)
        wanted = [entry_id for entry_id, topic, wf in entries if viewer.wants(topic, wf)]
        if viewer.kind == "ws":
            got = dict((p, at) for p, at in viewer.received)
            for entry_id in wanted:
                if entry_id not in got:
                    dropped += 1
                else:
                    latencies["ws"].append(got[entry_id] - committed_at[entry_id])
        else:  # an SSE "changed" event delivers every entry up to its position
            i = 0
            for entry_id in wanted:
                while i < len(viewer.received) and viewer.received[i][0] < entry_id:
                    i += 1
                if i == len(viewer.received):
                    dropped += 1
                else:
                    latencies[viewer.kind].append(viewer.received[i][1] - committed_at[entry_id])
    every = sorted(x for values in latencies.values() for x in values)

    def pct(values: list[float], q: float) -> float:
        return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")

    for kind, values in latencies.items():
        values.sort()
        print(
            f"change → delivered, {kind:13s} {len(values):7d} deliveries: p50 {pct(values, 0.5) * 1000:7.0f} ms, "
            f"p99 {pct(values, 0.99) * 1000:7.0f} ms, max {pct(values, 1.0) * 1000:7.0f} ms"
        )
    p99 = pct(every, 0.99)
    print(
        f"change → delivered, all {len(every)} deliveries: p50 {pct(every, 0.5) * 1000:.0f} ms, "
        f"p99 {p99 * 1000:.0f} ms (mean {statistics.fmean(every) * 1000 if every else float('nan'):.0f} ms); "
        f"dropped {dropped}, reordered or repeated {reordered}"
    )
    return [
        ("live_fanout_p99_change_to_delivered", p99, "s", "<=", 1),
        ("live_fanout_dropped", dropped, "entries", "<=", 0),
        ("live_fanout_reordered", reordered, "entries", "<=", 0),
        ("live_fanout_memory_per_subscriber", per_subscriber_kb, "KB", "<=", 200),
    ]


async def main(args: argparse.Namespace) -> None:
    why = await reachable()
    if why is None:
        async with scratch_postgres() as url:
            results = await measure(args, url)
    else:
        print(f"PostgreSQL is not reachable ({why}): on SQLite")
        with tempfile.TemporaryDirectory() as tmp:
            results = await measure(args, f"sqlite+aiosqlite:///{tmp}/live.db")
    for result in results:
        figure(*result)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=50, help="changes per second the writer records")
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--write", metavar="URL", help=argparse.SUPPRESS)  # the writer process
    parser.add_argument("--smoke", action="store_true", help="short run for CI (all the subscribers, 5 s of writes)")
    arguments = parser.parse_args()
    if arguments.smoke:
        arguments.seconds = 5
    if arguments.write:
        asyncio.run(write(arguments.write, arguments.rate, arguments.seconds))
    else:
        asyncio.run(main(arguments))
