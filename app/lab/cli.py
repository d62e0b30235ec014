"""`recovery lab up|down|status`: a real single-machine Slurm cluster for development and tests."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from importlib import resources
from typing import IO

ACTIONS = ("up", "down", "status", "build")
DEFAULT_LAB_DIR = "/tmp/recovery-lab"
# "host" runs the host's own Slurm packages; the others name the Debian release whose packages the
# lab runs (from a root built once with debootstrap when the host's release ships another one)
SLURM_VERSIONS = ("host", "22.05", "24.11", "26.05")
# "fast": a requeued job may run 5 s later and the schedulers run every 1-2 s (tests); "default": Slurm's own
# defaults (cred_expire and, 25.11+, requeue_delay 120 s; sched_interval=60, bf_interval=30), as sites run
TIMINGS = ("fast", "default")


def default_lab_dir() -> str:
    """The lab directory: $RECOVERY_LAB_DIR, else /tmp/recovery-lab."""
    return os.environ.get("RECOVERY_LAB_DIR") or DEFAULT_LAB_DIR


def script_path() -> str:
    """Path of the lab.sh shipped as package data next to this module."""
    return str(resources.files("app.lab").joinpath("lab.sh"))


def run(
    action: str,
    *,
    nodes: int = 3,
    dbd: bool = False,
    lab_dir: str | None = None,
    slurm: str | None = None,
    restd: bool = False,
    port_offset: int | None = None,
    timings: str | None = None,
    out: IO[str] = sys.stdout,
) -> int:
    """Run one lab action; its stdout (export lines or the status report) goes to `out`, progress to stderr.

    `slurm` is one of SLURM_VERSIONS (None: $RECOVERY_LAB_SLURM, else the host's); `port_offset`
    shifts every port (None: $RECOVERY_LAB_PORT_OFFSET, else 0). `down` and `status` act on what
    the lab directory runs, whatever `slurm` says. `timings` is one of TIMINGS (None: $RECOVERY_LAB_TIMINGS,
    else fast).
    """
    if action not in ACTIONS:
        raise ValueError(f"unknown lab action {action!r}; expected one of {', '.join(ACTIONS)}")
    if slurm is not None and slurm not in SLURM_VERSIONS:
        raise ValueError(f"unknown Slurm version {slurm!r}; expected one of {', '.join(SLURM_VERSIONS)}")
    if timings is not None and timings not in TIMINGS:
        raise ValueError(f"unknown lab timings {timings!r}; expected one of {', '.join(TIMINGS)}")
    env = dict(os.environ)
    env.update(
        RECOVERY_LAB_DIR=lab_dir or default_lab_dir(),
        RECOVERY_LAB_NODES=str(nodes),
        RECOVERY_LAB_DBD="1" if dbd else "0",
        RECOVERY_LAB_RESTD="1" if restd else "0",
    )
    if slurm is not None:
        env["RECOVERY_LAB_SLURM"] = slurm
    if port_offset is not None:
        env["RECOVERY_LAB_PORT_OFFSET"] = str(port_offset)
    if timings is not None:
        env["RECOVERY_LAB_TIMINGS"] = timings
    # stderr is inherited so progress shows while it works; stdout is captured for `out`
    proc = subprocess.run(["bash", script_path(), action], env=env, stdout=subprocess.PIPE, text=True, check=False)
    out.write(proc.stdout)
    out.flush()
    return proc.returncode


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point for `recovery lab ...` (app.cli delegates here)."""
    parser = argparse.ArgumentParser(
        prog="recovery lab", description="Run a real Slurm lab cluster (22.05, 24.11 or 26.05) on this machine (root)."
    )
    parser.add_argument("action", choices=ACTIONS)
    add_arguments(parser)
    args = parser.parse_args(argv)
    return run_args(args.action, args)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `recovery lab` (shared by app.cli and this module's own entry point)."""
    parser.add_argument("--nodes", type=int, default=3, help="emulated compute nodes node1..nodeN (default 3)")
    parser.add_argument("--dbd", action="store_true", help="also run slurmdbd against the MariaDB on 127.0.0.1:3306")
    parser.add_argument(
        "--slurm",
        choices=SLURM_VERSIONS,
        default=None,
        help="Slurm release: host (default, $RECOVERY_LAB_SLURM), 22.05, 24.11 (Debian trixie root) or 26.05 (forky)",
    )
    parser.add_argument(
        "--restd", action="store_true", help="also run slurmrestd with JWT auth (prints its URL, token)"
    )
    parser.add_argument(
        "--port-offset", type=int, default=None, help="added to every port, to run several labs at once (default 0)"
    )
    parser.add_argument(
        "--timings",
        choices=TIMINGS,
        default=None,
        help="fast (default, $RECOVERY_LAB_TIMINGS): requeued jobs wait 5 s, schedulers every 1-2 s; "
        "default: Slurm's defaults (120 s requeue delay, sched_interval=60, bf_interval=30)",
    )
    parser.add_argument(
        "--lab-dir", default=None, help=f"state directory (default $RECOVERY_LAB_DIR or {DEFAULT_LAB_DIR})"
    )


def run_args(action: str, args: argparse.Namespace) -> int:
    """Run `action` with the options add_arguments declared."""
    return run(
        action,
        nodes=args.nodes,
        dbd=args.dbd,
        lab_dir=args.lab_dir,
        slurm=args.slurm,
        restd=args.restd,
        port_offset=args.port_offset,
        timings=args.timings,
    )


if __name__ == "__main__":
    sys.exit(main())
