"""The benchmarks keep running: each smoke mode finishes and prints its ratio (no timing is asserted)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("bench/ingest.py", "ratio reader/grep:"),
        ("bench/observer_tick.py", "ratio tick / json.loads:"),
        ("bench/observer_tick_rest.py", "figure observer_tick_rest_ratio"),
        ("bench/collector_files.py", "ratio changed tick / baseline:"),
        ("bench/detection.py", "figure crash_recall "),
    ],
)
def test_benchmark_smoke_mode_prints_its_ratio(script: str, expected: str) -> None:
    result = subprocess.run([sys.executable, script, "--smoke"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert expected in result.stdout, result.stdout[-2000:]
