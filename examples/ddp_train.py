#!/usr/bin/env python3
"""A real PyTorch training program: DistributedDataParallel over gloo on CPU, launched by torchrun.

A tiny regression model trained for a few steps, with what a recoverable job does:

* print one progress line per step (rank 0): `iteration N | loss X | grad norm G | ...`;
* save a checkpoint with torch.save every --save-every steps (rank 0) and say so:
  `saved checkpoint to <dir>/iter_N.pt at iteration N`;
* on start, load the newest checkpoint if there is one (every rank) and say so:
  `loaded checkpoint from <path> at iteration N`.

Launch it on every node with torchrun (see examples/ddp.sbatch):
  srun torchrun --nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint=HOST:PORT ddp_train.py

Failures, for demos and tests; they hit the process on node --fault-node (the index of its node in
the allocation, SLURM_NODEID) at step --fault-step, on the attempts --fault-attempts names
(SLURM_RESTART_COUNT; default the first only, so the retry succeeds):
  --fault raise   feed that rank a batch of the wrong shape: torch raises a RuntimeError
  --fault kill    the rank kills itself with SIGKILL (what the kernel's OOM killer does)
  --fault hang    the rank sleeps before the gradient all-reduce; the others wait in the collective
                  until the process group's timeout (--pg-timeout seconds)
  --fault nan     that rank's batch turns to NaN: the all-reduced gradients and the loss become nan
  --fault stall   that rank's batch comes from a DataLoader worker that never delivers it (a stuck
                  data pipeline); the others wait in the all-reduce, as with hang
  --fault loader  that rank's batch comes from a DataLoader worker whose sample read raises (a corrupt
                  shard); torch re-raises it in the rank as "Caught ValueError in DataLoader worker process 0"
                  followed by the worker's original traceback
  --fault sigstop the rank stops itself with SIGSTOP before the step (state T); the others wait in the
                  gradient all-reduce, as with hang
  --fault fifo    the rank reads its next batch from a FIFO nobody writes (blocked in the kernel's open of
                  the FIFO); the others wait in the all-reduce, as with hang
  --fault save    at the checkpoint of step --fault-step that rank's torch.save of its own state fails
                  (an object pickle cannot save); the others wait at the save's barrier, so that
                  checkpoint is never written and the retry resumes from the one before
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel

FEATURES = 32
BATCH = 16


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module's docstring)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--save-every", type=int, default=5)
    parser.add_argument("--step-seconds", type=float, default=0.2, help="extra time per step, so a run can be watched")
    parser.add_argument("--checkpoint-dir", default=os.environ.get("CHECKPOINT_DIR", "checkpoints"))
    parser.add_argument("--pg-timeout", type=float, default=60.0, help="seconds a collective waits for a peer")
    faults = ("none", "raise", "kill", "hang", "stall", "loader", "nan", "save", "sigstop", "fifo")
    parser.add_argument("--fault", choices=faults, default="none")
    parser.add_argument("--fault-step", type=int, default=7)
    parser.add_argument("--fault-node", type=int, default=1, help="SLURM_NODEID of the failing process")
    parser.add_argument("--fault-attempts", default="0", help="comma-separated attempt numbers, or 'all'")
    return parser.parse_args(argv)


class StalledSamples(torch.utils.data.Dataset[torch.Tensor]):
    """A dataset whose samples take `seconds` each to read: a data pipeline stuck on a storage read."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __len__(self) -> int:
        return BATCH

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(self.seconds)
        return torch.zeros(FEATURES)


class CorruptSamples(torch.utils.data.Dataset[torch.Tensor]):
    """A dataset whose third sample cannot be decoded: a data pipeline reading a corrupt shard."""

    def __init__(self, directory: Path) -> None:
        self.shard = directory / "shard-0004.tar"

    def __len__(self) -> int:
        return BATCH

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == 2:
            raise ValueError(f"sample {index} of {self.shard} is corrupt: unexpected end of data")
        return torch.zeros(FEATURES)


def read_shard_from(path: Path) -> bytes:
    """A batch read from a named pipe (a FIFO): it blocks until a writer opens the other end."""
    if not path.exists():
        os.mkfifo(path)
    with open(path, "rb") as pipe:  # noqa: PTH123 - the FIFO's open is where it waits
        return pipe.read()


def newest_checkpoint(directory: Path) -> Path | None:
    """The checkpoint of the highest iteration in `directory`, if any."""
    found = [(int(path.stem.split("_", 1)[1]), path) for path in directory.glob("iter_*.pt")]
    return max(found)[1] if found else None


def faulty(args: argparse.Namespace, attempt: int) -> bool:
    """Whether this process is the one that fails, on this attempt."""
    if args.fault == "none" or int(os.environ.get("SLURM_NODEID", "0")) != args.fault_node:
        return False
    return args.fault_attempts == "all" or str(attempt) in args.fault_attempts.split(",")


@record
def main(argv: list[str] | None = None) -> int:
    """Train; return the exit code."""
    args = parse(argv)
    attempt = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=dt.timedelta(seconds=args.pg_timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    node = os.environ.get("SLURMD_NODENAME", "localhost")
    print(f"rank {rank}/{world} on {node} (pid {os.getpid()}, attempt {attempt}): gloo process group ready", flush=True)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
    directory = Path(args.checkpoint_dir)
    directory.mkdir(parents=True, exist_ok=True)
    start = 0
    path = newest_checkpoint(directory)
    if path is not None:
        state = torch.load(path, map_location="cpu")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = int(state["iteration"])
        if rank == 0:
            print(f"loaded checkpoint from {path} at iteration {start}", flush=True)

    generator = torch.Generator().manual_seed(1000 + rank)
    target_weights = torch.linspace(-1.0, 1.0, FEATURES)
    fails = faulty(args, attempt)
    for step in range(start + 1, args.steps + 1):
        began = time.monotonic()
        inputs = torch.randn(BATCH, FEATURES, generator=generator)
        targets = (inputs @ target_weights).unsqueeze(1)
        if fails and step == args.fault_step:
            if args.fault == "raise":
                inputs = inputs[:, :-1]  # a batch with one feature too few: the Linear layer refuses it
            elif args.fault == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif args.fault == "sigstop":
                os.kill(os.getpid(), signal.SIGSTOP)  # stopped until someone sends SIGCONT (nobody does)
            elif args.fault == "fifo":
                read_shard_from(directory / f"shard-rank{rank}.fifo")
            elif args.fault == "hang":
                time.sleep(10 * args.pg_timeout)  # the peers wait in the all-reduce below
            elif args.fault == "stall":  # the batch from a DataLoader worker that waits on its reads
                loader = torch.utils.data.DataLoader(
                    StalledSamples(10 * args.pg_timeout), batch_size=BATCH, num_workers=1
                )
                inputs = next(iter(loader))
            elif args.fault == "loader":  # the batch from a DataLoader worker whose read fails
                loader = torch.utils.data.DataLoader(CorruptSamples(directory), batch_size=BATCH, num_workers=1)
                inputs = next(iter(loader))
        if fails and args.fault == "nan" and step >= args.fault_step:
            inputs = torch.full_like(inputs, math.nan)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(inputs), targets)
        loss.backward()  # DDP all-reduces the gradients here
        grad_norm = torch.nn.utils.clip_grad_norm_(ddp.parameters(), max_norm=10.0)
        optimizer.step()
        reduced = loss.detach().clone()
        dist.all_reduce(reduced)
        time.sleep(args.step_seconds)
        if rank == 0:
            print(
                f"iteration {step} | loss {reduced.item() / world:.4f} | grad norm {grad_norm.item():.3f} | "
                f"lr {optimizer.param_groups[0]['lr']:.2E} | step time {time.monotonic() - began:.3f} s",
                flush=True,
            )
        if step % args.save_every == 0:
            if fails and args.fault == "save" and step == args.fault_step:
                # this rank's own state, with a callback pickle cannot save: torch.save raises
                state = {"generator": generator.get_state(), "on_resume": lambda: None}
                torch.save(state, directory / f"rank{rank}_iter_{step}.pt")
            dist.barrier()  # every rank reached the checkpoint before it is written
            if rank == 0:
                saved = directory / f"iter_{step}.pt"
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "iteration": step}, saved)
                print(f"saved checkpoint to {saved} at iteration {step}", flush=True)
            dist.barrier()
    if rank == 0:
        print(f"training finished at iteration {args.steps}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
