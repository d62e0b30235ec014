"""`python -m tests.fault_worker`: `recovery worker` with the tests' fault injection (never part of the service).

RECOVERY_FAULT_INJECT (read here only), e.g. `after:requeue_hold` or `before:release` (comma-separated for several),
makes the worker SIGKILL its own process right before the controller sends that command (its STARTED milestone
committed) or right after the command returned (before SUCCEEDED is recorded), through `Controller.step_hook`.
`pause-after:requeue_hold` (or `pause-before:…`) instead writes `<data dir>/fault-paused` at that point and waits,
the whole process standing still, until the test removes it (tests/worker/test_database_outage_lab.py stops
PostgreSQL there). Every other setting is the worker's own (RECOVERY_* as for `recovery worker`).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from app.cli import main
from app.domain.control.planner import StepKind
from app.infra.config import Settings
from worker.controller import Controller

FAULT_ENV = "RECOVERY_FAULT_INJECT"
log = logging.getLogger("recovery.tests.fault")


def parse_faults(raw: str | None) -> frozenset[str]:
    """`after:requeue_hold,before:release` -> {"after:requeue_hold", "before:release"}."""
    return frozenset(part.strip() for part in (raw or "").split(",") if part.strip())


def fault_hook(faults: frozenset[str], data_dir: str) -> Callable[[str, StepKind], None]:
    """The controller's step hook that dies like a kill -9, or pauses, at the points `faults` name."""

    def hook(when: str, step: StepKind) -> None:
        if f"{when}:{step.value}" in faults:
            log.error("fault injection %s:%s: killing the process now", when, step.value)
            logging.shutdown()
            os.kill(os.getpid(), signal.SIGKILL)
        if f"pause-{when}:{step.value}" in faults:
            marker = Path(data_dir) / "fault-paused"
            marker.write_text(f"{when}:{step.value}\n")
            log.error("fault injection pause-%s:%s: waiting until %s is removed", when, step.value, marker)
            while marker.exists():  # a blocking wait, like a stalled process
                time.sleep(0.1)

    return hook


if __name__ == "__main__":
    hook = fault_hook(parse_faults(os.environ.get(FAULT_ENV)), Settings.from_env().data_dir)
    Controller.step_hook = staticmethod(hook)  # a plain function, not bound to the controller
    sys.exit(main(["worker", *sys.argv[1:]]))
