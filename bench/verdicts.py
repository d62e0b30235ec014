"""Whether each bench's smoke mode gives its full mode's verdicts on a loaded machine: smoke runs beside a CPU hog.

Usage: .venv/bin/python bench/verdicts.py [--runs 5] [--hog 1] [--full FILE]... [bench/observer_tick.py ...]

Starts --hog busy-looping processes (killed by pid at the end), runs each named bench (default: every bench
tests/test_bench_smoke.py runs) with `--smoke` --runs times, and prints per figure how many runs met the goal
and the spread of the values. --full FILE (the output of a full run, any number) adds the full run's verdict,
so a line reads: figure, full verdict, smoke verdicts met/runs, smoke values min–max. Prints no figure lines
of its own: it judges the others'.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.figures import Figure, parse  # noqa: E402

BENCHES = [
    "bench/ingest.py",
    "bench/observer_tick.py",
    "bench/observer_tick_rest.py",
    "bench/collector_files.py",
    "bench/detection.py",
    "bench/live_fanout.py",
    "bench/api_audit.py",
]
HOG = "import time\nwhile True:\n    time.time()\n"


def main(args: argparse.Namespace) -> int:
    full: dict[str, Figure] = {}
    for path in args.full:
        full.update({f.name: f for f in parse(Path(path).read_text())})
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(args.hog)]
    runs: dict[str, list[Figure]] = {}
    try:
        for bench in args.benches or BENCHES:
            for n in range(args.runs):
                started = time.monotonic()
                result = subprocess.run(
                    [sys.executable, bench, "--smoke"], cwd=ROOT, capture_output=True, text=True, timeout=900
                )
                figures = parse(result.stdout)
                print(
                    f"{bench} run {n + 1}: {time.monotonic() - started:.0f} s, "
                    + (", ".join(f"{f.name}={f.value:.3g}" for f in figures) or f"failed: {result.stderr[-300:]}"),
                    flush=True,
                )
                for f in figures:
                    runs.setdefault(f.name, []).append(f)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    print()
    print("| figure | goal | full | smoke met (of runs) | smoke values |")
    print("|---|---|---|---|---|")
    unstable = 0
    for name, figures in runs.items():
        met = sum(f.met for f in figures)
        values = sorted(f.value for f in figures)
        reference = full.get(name)
        verdict = "—" if reference is None else ("met" if reference.met else "missed")
        if reference is not None:
            agree = met if reference.met else len(figures) - met
            unstable += agree != len(figures)
        elif 0 < met < len(figures):
            unstable += 1
        goal = f"{figures[0].op} {figures[0].target:g} {figures[0].unit}"
        print(f"| `{name}` | {goal} | {verdict} | {met}/{len(figures)} | {values[0]:.3g}–{values[-1]:.3g} |")
    print(f"\nfigures whose smoke verdict differs from the full one (or flips between runs): {unstable}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("benches", nargs="*", help="bench scripts (default: every one with a smoke mode)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--hog", type=int, default=1, help="busy-looping processes beside the runs")
    parser.add_argument("--full", action="append", default=[], help="output of a full run (figure lines)")
    sys.exit(main(parser.parse_args()))
