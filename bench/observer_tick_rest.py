"""Observer tick through the slurmrestd adapter: a 10,000-job `GET /slurm/v0.0.38/jobs` over real HTTP.

Usage: .venv/bin/python bench/observer_tick_rest.py [--jobs 10000] [--enrolled 1000] [--repeat 5] [--smoke]

The same snapshot as bench/observer_tick.py (real 22.05 records), served by a local HTTP server
in a thread as slurmrestd would serve it; each measured tick is one bulk request, the parse and
the comparison with the previous snapshot (unchanged: no database work). The goal of issue 13:
a tick within 1.5x of `json.loads` of the same bytes, for REST as for the CLI. The adapter parses
the answer incrementally (app/slurm/incremental.py: records unchanged since the last answer are
not parsed again), so the script also prints the tick after 1% of the jobs changed state, and the
first (full) parse.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from app.infra.config import Settings  # noqa: E402
from app.infra.context import AppContext  # noqa: E402
from app.infra.migrate import upgrade  # noqa: E402
from app.slurm.rest_scheduler import RestScheduler  # noqa: E402
from worker.observer import Observer  # noqa: E402

SPEC = json.dumps({"paths": {"/slurm/v0.0.38/jobs": {"get": {}}, "/slurm/v0.0.38/job/{job_id}": {}}}).encode()


def serve(answer: list[bytes]) -> ThreadingHTTPServer:
    """A slurmrestd stand-in on a free loopback port: /openapi/v3 and the bulk jobs answer (`answer[0]`)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = SPEC if self.path == "/openapi/v3" else answer[0]
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's name
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


async def main(args: argparse.Namespace) -> None:
    # the very snapshot of bench/observer_tick.py (a sibling script, not a package)
    build_snapshot = importlib.import_module("observer_tick").build_snapshot
    document = build_snapshot(args.jobs, args.enrolled)
    raw = json.dumps(document).encode()
    for record in document["jobs"][: max(1, args.jobs // 100)]:
        record["job_state"] = "COMPLETED"
    changed_raw = json.dumps(document).encode()
    print(f"snapshot: {args.jobs} jobs ({args.enrolled} enrolled), {len(raw) / 1e6:.1f} MB of JSON over HTTP")
    answer = [raw]
    server = serve(answer)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings.build(
            data_dir=tmp, environment="bench", cluster="bench", slurm_api="rest", slurmrestd_url=url
        )
        ctx = AppContext.open(settings)
        await upgrade(ctx.engine)
        rest = RestScheduler(settings, fallback=None)
        observer = Observer(ctx, rest)
        t0 = time.perf_counter()
        await observer.tick()
        first_s = time.perf_counter() - t0
        loads, ticks = [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            json.loads(raw)
            loads.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            await observer.tick()
            ticks.append(time.perf_counter() - t0)
        answer[0] = changed_raw
        t0 = time.perf_counter()
        await observer.tick()
        changed_s = time.perf_counter() - t0
        reparsed = rest.jobs_parser.decoded
        await rest.aclose()
        await ctx.close()
    server.shutdown()
    loads_s, tick_s = statistics.median(loads), statistics.median(ticks)
    print(f"json.loads of the same bytes:      {loads_s * 1000:8.1f} ms (median of {args.repeat})")
    print(f"REST observer tick, unchanged:     {tick_s * 1000:8.1f} ms (median of {args.repeat})")
    print(f"ratio tick / json.loads:           {tick_s / loads_s:8.2f}x")
    print(f"first tick (full parse, registers {args.enrolled} jobs): {first_s * 1000:8.1f} ms")
    print(f"tick after 1% of jobs changed:     {changed_s * 1000:8.1f} ms ({reparsed} records parsed again)")
    print(f"figure observer_tick_rest_ratio {tick_s / loads_s:.2f} x goal <= 1.5")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--enrolled", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="small run for CI (1,000 jobs)")
    arguments = parser.parse_args()
    if arguments.smoke:
        arguments.jobs, arguments.enrolled, arguments.repeat = 1_000, 100, 3
    asyncio.run(main(arguments))
