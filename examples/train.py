#!/usr/bin/env python3
"""A tiny stand-in for a GPU training program: Megatron-style progress, checkpoints, resume, failures.

It needs no GPU and no libraries. Use it to try Recovery, or as a template for what a real job
must do to be recoverable:

* print progress lines promptly (this program flushes every line; with real Python code run
  `python -u` or set PYTHONUNBUFFERED=1, or output sits in a buffer and looks like a hang);
* save checkpoints to durable storage and print a recognisable "saved checkpoint" line;
* on start, load the newest checkpoint if there is one and say so;
* read SLURM_RESTART_COUNT (unset on the first run, 1, 2, … after each requeue) if it wants to
  behave differently per attempt, and tag lines with `slurm_job_attempt=N` when several attempts
  share one log file.

Failure modes for demos and tests (they fire on the first attempt only, so the retry succeeds):
  --crash-at-step N   print an NCCL failure naming this node and exit 1 at step N
  --hang-at-step N    print progress until step N, then go silent while holding the node
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import sys
import time
from pathlib import Path


def stamp() -> str:
    return dt.datetime.now(dt.UTC).strftime("[%Y-%m-%d %H:%M:%S]")


def say(text: str, *, attempt: int, shared: bool) -> None:
    label = f" slurm_job_attempt={attempt}" if shared else ""
    print(f"{stamp()}{label} {text}", flush=True)


def latest_checkpoint(directory: Path) -> tuple[int, Path] | None:
    found = sorted(directory.glob("iter_*.json"))
    if not found:
        return None
    path = found[-1]
    return json.loads(path.read_text())["iteration"], path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--step-seconds", type=float, default=0.25)
    parser.add_argument("--save-every", type=int, default=10)
    parser.add_argument("--checkpoint-dir", default=os.environ.get("CHECKPOINT_DIR", "checkpoints"))
    parser.add_argument("--crash-at-step", type=int, default=0)
    parser.add_argument("--hang-at-step", type=int, default=0)
    parser.add_argument("--shared-log", action="store_true", help="tag lines with slurm_job_attempt=N")
    args = parser.parse_args()

    attempt = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    node = os.environ.get("SLURMD_NODENAME", "localhost")
    job = os.environ.get("SLURM_JOB_ID", "0")
    ckpt_dir = Path(args.checkpoint_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)

    def log(text: str) -> None:
        say(text, attempt=attempt, shared=args.shared_log)

    log(f"job {job} attempt {attempt} on {node}: building model (2 layers, 1.3M params)")
    start = 0
    resumed = latest_checkpoint(ckpt_dir)
    if resumed:
        start, path = resumed
        log(f"  successfully loaded checkpoint from {ckpt_dir} [ t 1/1, p 1/1 ] at iteration {start}")
    log("training ...")
    log("[before the start of training step] datetime: " + dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S"))

    rng = random.Random(int(job) if job.isdigit() else 0)
    loss = 4.0 * (0.97**start)
    for step in range(start + 1, args.steps + 1):
        time.sleep(args.step_seconds)
        loss = max(0.5, loss * 0.97 + rng.uniform(-0.02, 0.02))
        elapsed_ms = args.step_seconds * 1000 * rng.uniform(0.95, 1.05)
        tflops = 180.0 * rng.uniform(0.97, 1.03)
        log(
            f" iteration {step:8d}/{args.steps:8d} | consumed samples: {step * 256:12d} | "
            f"elapsed time per iteration (ms): {elapsed_ms:.1f} | throughput per GPU (TFLOP/s/GPU): {tflops:.1f} | "
            f"learning rate: 3.000E-04 | global batch size:   256 | lm loss: {loss:.6E} |"
        )
        if step % args.save_every == 0:
            path = ckpt_dir / f"iter_{step:07d}.json"
            path.write_text(json.dumps({"iteration": step, "loss": loss}))
            log(f"  successfully saved checkpoint from iteration {step:7d} to {ckpt_dir}")
        if attempt == 0 and step == args.crash_at_step:
            # Shaped like NCCL's own warning (host:pid:tid prefix), so the failing node is named.
            log(
                f"{node}:{os.getpid()}:{os.getpid() + 7} [0] transport/net_ib.cc:1696 NCCL WARN "
                f"NET/IB : Got completion from peer 10.0.0.8<52914> with error 12, opcode 129, len 0, vendor err 129 "
                f"(Recv)"
            )
            log(
                f"torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
                f"remote process exited or there was a network error, NCCL version 2.21.5 (on {node})"
            )
            return 1
        if attempt == 0 and step == args.hang_at_step:
            # Holds its allocation but prints nothing more: what a deadlocked collective looks like.
            while True:
                time.sleep(3600)
    log(f"training finished at iteration {args.steps}; final lm loss {loss:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
