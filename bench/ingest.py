"""Log ingestion throughput: the collector's read path (chunks, prefilter, latest progress, step counters,
throughput) against `grep -E -c` with the same crash patterns, on the same file in the same run; the cost of
structural progress and of the template miner alone are shown separately.

    .venv/bin/python bench/ingest.py            # ~300 MB generated log
    .venv/bin/python bench/ingest.py --smoke    # ~20 MB (CI)
    .venv/bin/python bench/ingest.py --file /path/to/big.log [--engine re]

Prints MB/s for both and the ratio, and the pure-Python fallback (no hyperscan) on the same file in the same
run; ends with `figure` lines (bench/figures.py). Makes no timed assertions.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.domain.detection.rules_builtin import default_ruleset  # noqa: E402
from app.domain.detection.templates import TemplateMiner  # noqa: E402
from app.jobfiles.reader import FilePosition, LogTailer  # noqa: E402
from bench.figures import figure  # noqa: E402


def _iteration_line(rng: random.Random, when: datetime, iteration: int, total: int) -> str:
    return (
        f" [{when:%Y-%m-%d %H:%M:%S}] iteration {iteration:>8}/{total:>8} | consumed samples: {iteration * 512:>12} | "
        f"elapsed time per iteration (ms): {rng.uniform(980, 1100):.1f} | throughput per GPU "
        f"(TFLOP/s/GPU): {rng.uniform(380, 420):.1f} | "
        f"learning rate: {3e-4 * (1 - iteration / total):.6E} | global batch size:   512 | lm loss: "
        f"{rng.uniform(1.8, 2.6):.6E} | "
        f"loss scale: 1.0 | grad norm: {rng.uniform(0.1, 0.6):.3f} | number of skipped iterations:   "
        f"0 | number of nan iterations:   0 |\n"
    )


NOISE = (
    "node{n:03d}:{pid}:{pid} [{gpu}] NCCL INFO Channel 02/0 : {gpu} -> {peer} [send] via NET/IB/0/GDRDMA\n",
    "[rank{rank}]:[W{md} {hms}.123456 ProcessGroupNCCL.cpp:4115] Warning: NCCL error handling is enabled; errors=0\n",
    "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py:558: UserWarning: This DataLoader "
    "will create 8 worker processes in total; error_handling=retry\n",
    " [{ts}] validation loss at iteration {it} | lm loss value: 2.1E+00 | lm loss PPL: 8.1E+00 |\n",
)


def generate(path: Path, target_bytes: int, seed: int = 7) -> None:
    """A realistic Megatron-style log: startup, iteration lines, noise, checkpoints, and a crash at the end."""
    rng = random.Random(seed)
    when = datetime(2026, 11, 30, 2, 0, 0)
    total = 500000
    with open(path, "w", encoding="utf-8") as out:
        out.write("using world size: 1024, data-parallel size: 128, tensor-model-parallel size: 8\n")
        for rank in range(64):
            out.write(
                f"node{rank // 8:03d}:{1000 + rank}:{1000 + rank} [{rank % 8}] NCCL INFO Bootstrap : "
                f"Using ib0:10.0.{rank // 8}.1<0>\n"
            )
        out.write(" loading checkpoint from /ckpt/gpt3 at iteration 1000\n")
        out.write("  successfully loaded checkpoint from /ckpt/gpt3 [ t 1/8, p 1/4 ] at iteration 1000\n")
        out.write("training ...\n[before the start of training step] datetime: 2026-11-30 02:00:00\n")
        written = out.tell()
        iteration = 1000
        while written < target_bytes:
            lines = []
            for _ in range(2000):
                iteration += 1
                when += timedelta(seconds=1)
                lines.append(_iteration_line(rng, when, iteration, total))
                if rng.random() < 0.08:
                    template = rng.choice(NOISE)
                    lines.append(
                        template.format(
                            n=rng.randrange(128),
                            pid=rng.randrange(10**5),
                            gpu=rng.randrange(8),
                            peer=rng.randrange(8),
                            rank=rng.randrange(1024),
                            md=when.strftime("%m%d"),
                            hms=when.strftime("%H:%M:%S"),
                            ts=f"{when:%Y-%m-%d %H:%M:%S}",
                            it=iteration,
                        )
                    )
                if iteration % 1000 == 0:
                    lines.append(f"saving checkpoint at iteration {iteration:7d} to /ckpt/gpt3 in torch_dist format\n")
                    lines.append(
                        f"  successfully saved checkpoint from iteration {iteration:7d} to /ckpt/gpt3 "
                        f"[ t 1/8, p 1/4 ]\n"
                    )
            chunk = "".join(lines)
            out.write(chunk)
            written += len(chunk.encode())
        out.write(
            "[rank17]:[E1130 09:00:00.000000 ProcessGroupNCCL.cpp:616] [Rank 17] Watchdog caught "
            "collective operation timeout: "
            "WorkNCCL(SeqNum=81, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600023 milliseconds before timing out.\n"
        )
        out.write(
            "Nov 30 09:00:01 node012 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=12345, name=python, "
            "GPU has fallen off the bus.\n"
        )
        out.write(
            "slurmstepd: error: *** JOB 4242 ON node000 CANCELLED AT 2026-11-30T09:00:05 DUE TO NODE FAILURE ***\n"
        )


def grep_pattern() -> str:
    """The crash anchors as one POSIX ERE alternation (what an operator would grep for)."""
    anchors = default_ruleset().anchors_of("crash")
    escaped = (re.sub(r"([.\[\]()*+?{}|^$\\])", r"\\\1", a.rstrip("\n")) for a in anchors)
    # an anchor ending in a newline stands for its text at the end of a line
    return "|".join(e + "$" if a.endswith("\n") else e for e, a in zip(escaped, anchors, strict=True))


def run_reader(path: Path, engine: str, structure: bool = True) -> tuple[float, dict[str, object]]:
    tailer = LogTailer(engine=engine, structure=structure)  # rules compile once per process, outside the timing
    position = FilePosition(path=str(path))
    events = 0
    throughput = 0
    progress = None
    started = time.perf_counter()
    while True:
        result = tailer.read(position)
        position = result.position
        events += len(result.events)
        throughput += len(result.throughput)
        progress = result.latest_progress or progress
        if not result.more:
            break
    elapsed = time.perf_counter() - started
    tailer.close()
    return elapsed, {
        "engine": tailer.engine,
        "events": events,
        "lines": position.line_number,
        "progress": getattr(progress.signal, "phase", None) if progress else None,
        "throughput_samples": throughput,
    }


def run_miner(path: Path) -> tuple[float, int, int]:
    """The template miner alone on EVERY line holding a digit (what an offline pass costs; live reads sample
    the last lines of each chunk): (seconds, lines fed, templates kept)."""
    miner = TemplateMiner()
    started = time.perf_counter()
    with open(path, "rb") as handle:
        for raw in handle:
            miner.observe(raw.decode("utf-8", errors="replace").rstrip("\n"))
    return time.perf_counter() - started, miner.lines, miner.templates


def run_grep(path: Path) -> tuple[float, str] | None:
    grep = shutil.which("grep")
    if grep is None:
        return None
    started = time.perf_counter()
    proc = subprocess.run(
        [grep, "-E", "-c", grep_pattern(), str(path)], capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"}
    )
    return time.perf_counter() - started, proc.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--file", type=Path, help="benchmark this log instead of generating one")
    parser.add_argument("--smoke", action="store_true", help="~20 MB instead of ~300 MB")
    parser.add_argument("--mb", type=int, help="size of the generated log in MB")
    parser.add_argument("--engine", choices=("auto", "hyperscan", "python"), default="auto")
    parser.add_argument(
        "--repeat", type=int, default=5, help="take the best of N runs of each, in turns (page cache warm)"
    )
    parser.add_argument("--no-fallback", action="store_true", help="skip timing the pure-Python fallback")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = args.file
        if path is None:
            path = Path(tmp) / "megatron.log"
            megabytes = args.mb or (20 if args.smoke else 300)
            generate(path, megabytes * 1024 * 1024)
        size_mb = path.stat().st_size / 1e6
        path.read_bytes() if size_mb < 2000 else None  # warm the page cache for both contenders
        reader_times: list[float] = []
        grep_times: list[float] = []
        facts: dict[str, Any] = {}
        grep_count = ""
        for _ in range(max(1, args.repeat)):
            elapsed, facts = run_reader(path, args.engine)
            reader_times.append(elapsed)
            grepped = run_grep(path)
            if grepped:
                grep_times.append(grepped[0])
                grep_count = grepped[1]
        reader_rate = size_mb / min(reader_times)
        print(f"file: {path} ({size_mb:.1f} MB)")
        print(
            f"reader+signatures+progress [{facts['engine']}]: {reader_rate:8.1f} MB/s  "
            f"({min(reader_times):.3f} s; {facts})"
        )
        if grep_times:
            grep_rate = size_mb / min(grep_times)
            print(
                f"grep -E -c (same crash patterns):           {grep_rate:8.1f} MB/s  "
                f"({min(grep_times):.3f} s; count {grep_count})"
            )
            print(f"ratio reader/grep: {reader_rate / grep_rate:.2f}")
        else:
            grep_rate = float("nan")
            print("grep not found; no comparison")
        plain_s = min(run_reader(path, args.engine, structure=False)[0] for _ in range(max(1, args.repeat)))
        print(
            f"without structural progress (counters, miner): {size_mb / plain_s:8.1f} MB/s  ({plain_s:.3f} s); "
            f"structural progress adds {1000 * (min(reader_times) - plain_s):.1f} ms"
        )
        miner_s, miner_lines, templates = run_miner(path)
        print(
            f"template miner alone, every line:             {size_mb / miner_s:8.1f} MB/s  ({miner_s:.3f} s; "
            f"{miner_lines} lines fed, {templates} templates kept)"
        )
        fallback_rate = float("nan")
        if args.engine != "python" and not args.no_fallback:
            fallback_s, fallback_facts = run_reader(path, "python")
            fallback_rate = size_mb / fallback_s
            same = "same findings" if fallback_facts["events"] == facts["events"] else "DIFFERENT findings"
            print(
                f"pure-Python fallback (no hyperscan):        {fallback_rate:8.1f} MB/s  ({fallback_s:.3f} s; {same}); "
                f"ratio fallback/grep: {fallback_rate / grep_rate:.2f}"
            )
        figure("ingest_vs_grep", reader_rate / grep_rate, "x", ">=", 2)
        # No goal of its own: the miner's cost when fed every line (check-log); live reads sample a few lines.
        figure("template_miner_every_line", size_mb / miner_s, "MB/s", ">", 0)
        if not args.no_fallback:
            # No goal of its own: it is measured so a missing hyperscan is a known cost, not a surprise.
            figure("ingest_python_fallback_vs_grep", fallback_rate / grep_rate, "x", ">", 0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
