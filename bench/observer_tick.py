"""Observer tick cost on a 10,000-job `squeue --json` snapshot, against `json.loads` of the same bytes.

Usage: .venv/bin/python bench/observer_tick.py [--jobs 10000] [--enrolled 1000] [--repeat 5] [--smoke]

The snapshot is built from a real Slurm 22.05 record captured on the lab
(tests/fixtures/slurm/squeue-v0.0.38-lab.json), one record per job with its own id, state and
comment. The first tick registers the enrolled jobs; the measured ticks see an unchanged snapshot
(parse + compare, no database work) and then one where 1% of the jobs changed state.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.config import Settings  # noqa: E402
from app.context import AppContext  # noqa: E402
from app.migrate import upgrade  # noqa: E402
from app.slurm.parse import parse_snapshot  # noqa: E402
from app.slurm.records import Snapshot  # noqa: E402
from worker.observer import Observer  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "slurm" / "squeue-v0.0.38-lab.json"


def build_snapshot(jobs: int, enrolled: int) -> dict:
    """A squeue --json document with `jobs` records, `enrolled` of them carrying an APS policy."""
    document = json.loads(FIXTURE.read_text())
    template = document["jobs"][0]
    records = []
    for i in range(jobs):
        record = copy.deepcopy(template)
        record["job_id"] = 100000 + i
        record["name"] = f"train-{i}"
        record["job_state"] = "RUNNING"
        record["restart_cnt"] = 0
        if i < enrolled:
            record["comment"] = json.dumps(
                {
                    "APS": {
                        "workflow_id": f"wf-{i % 200}",
                        "environment": "bench",
                        "mode": "observe",
                        "max_requeue_times": 2,
                    }
                }
            )
        else:
            record["comment"] = "" if i % 3 else "nightly evaluation"
        records.append(record)
    document["jobs"] = records
    return document


class StaticScheduler:
    """Serves pre-recorded bytes as `squeue --json` answers (the benchmark measures parsing + apply)."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    async def list_jobs(self) -> Snapshot:
        return parse_snapshot(self.raw)


async def main(args: argparse.Namespace) -> None:
    document = build_snapshot(args.jobs, args.enrolled)
    raw = json.dumps(document).encode()
    changed_doc = copy.deepcopy(document)
    for record in changed_doc["jobs"][: max(1, args.jobs // 100)]:
        record["job_state"] = "COMPLETED"
    changed_raw = json.dumps(changed_doc).encode()
    print(f"snapshot: {args.jobs} jobs ({args.enrolled} enrolled), {len(raw) / 1e6:.1f} MB of JSON")

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings.build(data_dir=tmp, environment="bench", cluster="bench")
        ctx = AppContext.open(settings)
        await upgrade(ctx.engine)
        scheduler = StaticScheduler(raw)
        observer = Observer(ctx, scheduler)  # type: ignore[arg-type]
        started = time.perf_counter()
        await observer.tick()
        first_s = time.perf_counter() - started
        print(f"first tick (registers {args.enrolled} jobs and attempts): {time.perf_counter() - started:.2f} s")

        loads, ticks = [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            json.loads(raw)
            loads.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            await observer.tick()
            ticks.append(time.perf_counter() - t0)
        loads_s, tick_s = statistics.median(loads), statistics.median(ticks)
        print(f"json.loads of the same bytes:      {loads_s * 1000:8.1f} ms (median of {args.repeat})")
        print(f"observer tick, unchanged snapshot: {tick_s * 1000:8.1f} ms (median of {args.repeat})")
        print(f"ratio tick / json.loads:           {tick_s / loads_s:8.2f}x")

        scheduler.raw = changed_raw
        t0 = time.perf_counter()
        await observer.tick()
        print(f"observer tick, 1% of jobs changed:  {(time.perf_counter() - t0) * 1000:8.1f} ms")
        changed_s = time.perf_counter() - t0
        await ctx.close()
    from bench.figures import figure

    figure("observer_first_tick_vs_json_loads", first_s / loads_s, "x", "<=", 4)
    figure("observer_unchanged_tick_vs_json_loads", tick_s / loads_s, "x", "<=", 1.2)
    figure("observer_changed_tick_vs_unchanged", changed_s / tick_s, "x", "<=", 1.3)


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
