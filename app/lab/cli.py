"""`recovery lab up|down|status`: a real single-machine Slurm cluster for development and tests."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from importlib import resources
from typing import IO

ACTIONS = ("up", "down", "status")
DEFAULT_LAB_DIR = "/tmp/recovery-lab"


def default_lab_dir() -> str:
    """The lab directory: $RECOVERY_LAB_DIR, else /tmp/recovery-lab."""
    return os.environ.get("RECOVERY_LAB_DIR") or DEFAULT_LAB_DIR


def script_path() -> str:
    """Path of the lab.sh shipped as package data next to this module."""
    return str(resources.files("app.lab").joinpath("lab.sh"))


def run(
    action: str, *, nodes: int = 3, dbd: bool = False, lab_dir: str | None = None, out: IO[str] = sys.stdout
) -> int:
    """Run one lab action; its stdout (export lines or the status report) goes to `out`, progress to stderr."""
    if action not in ACTIONS:
        raise ValueError(f"unknown lab action {action!r}; expected one of {', '.join(ACTIONS)}")
    env = dict(os.environ)
    env.update(
        RECOVERY_LAB_DIR=lab_dir or default_lab_dir(),
        RECOVERY_LAB_NODES=str(nodes),
        RECOVERY_LAB_DBD="1" if dbd else "0",
    )
    # stderr is inherited so progress shows while it works; stdout is captured for `out`
    proc = subprocess.run(["bash", script_path(), action], env=env, stdout=subprocess.PIPE, text=True, check=False)
    out.write(proc.stdout)
    out.flush()
    return proc.returncode


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point for `recovery lab ...` (app.cli delegates here)."""
    parser = argparse.ArgumentParser(
        prog="recovery lab", description="Run a real Slurm 22.05 lab cluster on this machine (root)."
    )
    parser.add_argument("action", choices=ACTIONS)
    parser.add_argument("--nodes", type=int, default=3, help="emulated compute nodes node1..nodeN (default 3)")
    parser.add_argument("--dbd", action="store_true", help="also run slurmdbd against the MariaDB on 127.0.0.1:3306")
    parser.add_argument(
        "--lab-dir", default=None, help=f"state directory (default $RECOVERY_LAB_DIR or {DEFAULT_LAB_DIR})"
    )
    args = parser.parse_args(argv)
    return run(args.action, nodes=args.nodes, dbd=args.dbd, lab_dir=args.lab_dir)


if __name__ == "__main__":
    sys.exit(main())
