"""The benchmarks keep running: each smoke mode finishes and ends with well-formed `figure` lines (no timing is
asserted: whether a goal is met is the bench's answer, not the test's)."""

import io
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.figures import Figure, figure, parse
from tests.plugins import require
from tests.plugins.slurm_lab import lab_lock

ROOT = Path(__file__).resolve().parent.parent

# Every bench/*.py but recovery_latency.py, which needs root and starts a Slurm lab of its own (its own test below).
SMOKE = [
    ("bench/ingest.py", ["ingest_vs_grep", "ingest_python_fallback_vs_grep"]),
    (
        "bench/observer_tick.py",
        [
            "observer_first_tick_vs_json_loads",
            "observer_unchanged_tick_vs_json_loads",
            "observer_changed_tick_vs_floor",
            "observer_first_tick_vs_json_loads_postgresql",
            "observer_unchanged_tick_vs_json_loads_postgresql",
            "observer_changed_tick_vs_floor_postgresql",
            "observer_first_tick_fast_paths_saved",
            "observer_first_tick_fast_paths_saved_postgresql",
        ],
    ),
    ("bench/observer_tick_rest.py", ["observer_tick_rest_ratio"]),
    ("bench/collector_files.py", ["collector_idle_poll_tick_vs_stat", "worker_resident_memory"]),
    ("bench/detection.py", ["crash_recall"]),
    (
        "bench/live_fanout.py",
        [
            "live_fanout_p99_change_to_delivered",
            "live_fanout_dropped",
            "live_fanout_reordered",
            "live_fanout_memory_per_subscriber",
        ],
    ),
    pytest.param(
        "bench/api_audit.py",
        [
            "graphql_first_page_vs_floor",
            "rest_first_page_vs_floor",
            "graphql_deep_page_vs_first_page",
            "graphql_executor_fast_path_saved",
        ],
        marks=pytest.mark.postgres,
    ),
    ("bench/ingest_push.py", ["push_loki_vs_file_lines", "push_otlp_vs_file_lines", "push_loki_lines_per_s"]),
]


def test_every_bench_is_covered() -> None:
    benches = {p.name for p in (ROOT / "bench").glob("*.py")} - {
        "figures.py",
        "scratch_db.py",
        "recovery_latency.py",
        "stack_capture.py",  # root and a Slurm lab, like recovery_latency.py (run by hand: README benchmark table)
        "verdicts.py",
    }
    covered = {Path(str(p.values[0] if hasattr(p, "values") else p[0])).name for p in SMOKE}
    assert benches == covered


def assert_ends_with_figures(result: subprocess.CompletedProcess[str], names: list[str]) -> list[Figure]:
    """The run succeeded and its last lines are well-formed `figure` lines naming at least `names`."""
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.rstrip("\n").splitlines()
    figures = parse(result.stdout)
    assert figures, result.stdout[-2000:]
    # The figure lines are the last lines, every one of them well-formed.
    tail = lines[-len(figures) :]
    assert all(line.startswith("figure ") for line in tail), tail
    assert [f.name for f in parse("\n".join(tail))] == [f.name for f in figures]
    assert set(names) <= {f.name for f in figures}
    return figures


@pytest.mark.parametrize(("script", "names"), SMOKE)
def test_benchmark_smoke_mode_ends_with_figure_lines(script: str, names: list[str]) -> None:
    result = subprocess.run([sys.executable, script, "--smoke"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert_ends_with_figures(result, names)


def test_recovery_latency_smoke_runs_on_a_lab_of_its_own() -> None:
    if os.geteuid() != 0 or shutil.which("slurmctld") is None:
        require("root and the Slurm lab packages", "bench/recovery_latency.py starts a lab of its own")
    with lab_lock():  # it starts and stops a lab: not while another test starts one or stops a daemon on purpose
        result = subprocess.run(
            [sys.executable, "bench/recovery_latency.py", "--smoke"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
    figures = assert_ends_with_figures(
        result,
        [
            "recovery_requeue_vs_requeueexit_fast",
            "recovery_twin_vs_requeueexit_fast",
            "recovery_partial_twin_vs_requeueexit_fast",
            "recovery_partial_requeue_vs_requeueexit_fast",
            "recovery_crash_line_to_last_command_fast",
        ],
    )
    # Its own lab has RequeueExit: every figure, the baselines' ratios too, was measured (a nan would mean not).
    assert not any(math.isnan(f.value) for f in figures), result.stdout[-2000:]


def test_figure_lines_round_trip_and_judge_their_goal() -> None:
    out = io.StringIO()
    figure("graphql_first_page_vs_floor", 1.7, "x", "<=", 2, out=out)
    figure("ingest_vs_grep", 1.05, "x", ">=", 2, out=out)
    figure("recovery_partial_failure_vs_requeueexit", float("nan"), "x", "<=", 0.2, out=out)
    assert out.getvalue().splitlines()[0] == "figure graphql_first_page_vs_floor 1.7 x goal <= 2"
    parsed = parse(out.getvalue() + "figure broken line\n")
    assert [f.name for f in parsed] == [
        "graphql_first_page_vs_floor",
        "ingest_vs_grep",
        "recovery_partial_failure_vs_requeueexit",
    ]
    assert [f.met for f in parsed] == [True, False, False]  # an unmeasured (nan) figure never meets its goal
    assert Figure("x", 3.0, "s", "<", 3.0).met is False
    with pytest.raises(ValueError):
        figure("bad", 1, "x", "=<", 2, out=out)
