"""Stack capture on the real Slurm lab: what capturing every rank's stack adds to hang -> release.

    .venv/bin/python bench/stack_capture.py            # 3 captures each of a 2-node and a 3-node job
    .venv/bin/python bench/stack_capture.py --smoke    # 1 each

The controller captures inline, right before it sends requeue-hold, so the capture's own duration is what it adds
to hang -> release (when the stacks blame a node, one advisor pass more follows; not measured here). Each job is a
real 2- or 3-node job whose ranks (RANK set, one per node) wait in Python; the capture is the worker's own
(worker/stack_capture.py: srun --overlap, the probe, py-spy). Uses the lab at $RECOVERY_LAB_DIR (brought up when
it is not running; needs root and the lab packages). Ends with `figure` lines (bench/figures.py).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.infra.config import Settings  # noqa: E402
from app.lab.cli import default_lab_dir  # noqa: E402
from app.lab.cli import run as lab_run  # noqa: E402
from bench.figures import figure  # noqa: E402
from worker import stack_capture  # noqa: E402

JOB = """#!/bin/bash
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node=1
#SBATCH --time=00:05:00
#SBATCH --output={out}/bench-stacks-%j.out
srun bash -c 'RANK=$SLURM_PROCID exec {python} -c "import time
def wait_for_peers():
    time.sleep(300)
wait_for_peers()"'
"""


def _lab() -> tuple[Path, dict[str, str]]:
    lab_dir = Path(default_lab_dir())
    out = io.StringIO()
    if lab_run("up", nodes=3, lab_dir=str(lab_dir), out=out) != 0:
        raise SystemExit(f"`recovery lab up` failed: {out.getvalue()[-500:]}")
    env = {**os.environ, "SLURM_CONF": str(lab_dir / "etc" / "slurm.conf")}
    return lab_dir / "bin", env


def _submit(bin_dir: Path, env: dict[str, str], nodes: int, out: str) -> tuple[int, tuple[str, ...]]:
    script = JOB.format(nodes=nodes, out=out, python=sys.executable)
    job_id = int(
        subprocess.run(
            [str(bin_dir / "sbatch"), "--parsable"], input=script, env=env, capture_output=True, text=True, check=True
        ).stdout.split(";")[0]
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = subprocess.run(
            [str(bin_dir / "squeue"), "-h", "-j", str(job_id), "-o", "%T %N"], env=env, capture_output=True, text=True
        ).stdout.split()
        if line and line[0] == "RUNNING":
            hosts = subprocess.run(
                [str(bin_dir / "scontrol"), "show", "hostnames", line[1]], env=env, capture_output=True, text=True
            ).stdout.split()
            time.sleep(1.5)  # the ranks are in their Python
            return job_id, tuple(hosts)
        time.sleep(0.3)
    raise SystemExit(f"job {job_id} did not start within 60 s")


async def measure(runs: int) -> int:
    bin_dir, env = _lab()
    pyspy = str(Path(sys.executable).parent / "py-spy")
    settings = dataclasses.replace(Settings.from_env(), slurm_bin_dir=str(bin_dir), stack_capture_pyspy=pyspy)
    medians: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as out:
        for nodes in (2, 3):
            job_id, hosts = _submit(bin_dir, env, nodes, out)
            took: list[float] = []
            try:
                for _ in range(runs):
                    started = time.monotonic()
                    taken = await stack_capture.capture(settings, job_id=job_id, nodes=hosts, env=env)
                    took.append(time.monotonic() - started)
                    ranks = sorted((r.rank, r.top.func if r.top else None) for r in taken.ranks)
                    print(f"{nodes} nodes: {taken.status} in {took[-1]:.2f} s, {taken.bytes} bytes, ranks {ranks}")
                    if taken.status != "CAPTURED":
                        print(f"  problems: {taken.problems}")
            finally:
                subprocess.run([str(bin_dir / "scancel"), str(job_id)], env=env, check=False)
            medians[nodes] = statistics.median(took)
    figure("stack_capture_2_nodes", medians[2], "s", "<=", 5)
    figure("stack_capture_3_nodes", medians[3], "s", "<=", 5)
    figure("stack_capture_added", max(medians.values()), "s", "<=", 5)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="one capture per job size")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    return asyncio.run(measure(1 if args.smoke else args.runs))


if __name__ == "__main__":
    sys.exit(main())
