"""A real HTTP receiver process for notification tests (tests/notify/receiver.py), failing while a flag file exists."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

RECEIVER = Path(__file__).with_name("receiver.py")


class Receiver:
    """tests/notify/receiver.py as a process: fails with 500 while `flag` exists."""

    def __init__(self, tmp: Path) -> None:
        self.flag, self.received, self.failures = tmp / "failing", tmp / "received.jsonl", tmp / "failures.log"
        self.flag.touch()
        self.proc = subprocess.Popen(
            [sys.executable, str(RECEIVER), str(self.flag), str(self.received), str(self.failures)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline().split()[1])

    def messages(self) -> list[dict[str, Any]]:
        if not self.received.exists():
            return []
        return [json.loads(line) for line in self.received.read_text().splitlines()]

    def failed(self) -> int:
        return len(self.failures.read_text().splitlines()) if self.failures.exists() else 0

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
