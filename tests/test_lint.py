"""ruff (lint and format) and mypy pass on the tree: they run with the suite, configured in pyproject.toml."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _run(*command: str) -> None:
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"


def test_ruff_check() -> None:
    _run(str(BIN / "ruff"), "check", ".")


def test_ruff_format() -> None:
    _run(str(BIN / "ruff"), "format", "--check", ".")


def test_mypy() -> None:
    _run(str(BIN / "mypy"))
