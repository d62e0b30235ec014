"""The node probe and the capture's reading of its output, without Slurm: a real process, the real probe, py-spy."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from worker import stack_capture

PROGRAM = "import time\ndef wait_for_peers():\n    time.sleep(60)\nprint('ready', flush=True)\nwait_for_peers()\n"


def _rank(tmp_path: Path, **env: str) -> subprocess.Popen[str]:
    environ = {**os.environ, "SLURM_JOB_ID": "424242", "SLURMD_NODENAME": "probe-node", "RANK": "3", **env}
    proc = subprocess.Popen([sys.executable, "-c", PROGRAM], stdout=subprocess.PIPE, text=True, env=environ)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def _probe(pyspy: str) -> dict[str, object]:
    env = {**os.environ, "SLURMD_NODENAME": "probe-node", "SLURM_STEP_ID": "7"}
    out = subprocess.run(
        [sys.executable, "-c", stack_capture.PROBE_SOURCE, "424242", pyspy, "4000", "10"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    ).stdout
    lines = [line for line in out.splitlines() if line.startswith(stack_capture.MARK)]
    assert len(lines) == 1, out
    return json.loads(lines[0][len(stack_capture.MARK) :])


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def test_the_probe_finds_the_jobs_rank_and_its_frame(tmp_path: Path) -> None:
    pyspy = str(Path(sys.executable).parent / "py-spy")
    if not Path(pyspy).exists():
        pytest.skip("py-spy (test extra) not installed")
    flight = tmp_path / "fr_"
    (tmp_path / "fr_3").write_bytes(
        pickle.dumps({"entries": [{"collective_seq_id": 5, "state": "started", "profiling_name": "nccl:all_reduce"}]})
    )
    proc = _rank(tmp_path, TORCH_NCCL_TRACE_BUFFER_SIZE="2000", TORCH_NCCL_DEBUG_INFO_TEMP_FILE=str(flight))
    try:
        time.sleep(0.2)
        report = _probe(pyspy)
    finally:
        _stop(proc)
    assert report["node"] == "probe-node"
    processes = report["processes"]
    assert isinstance(processes, list) and [p["pid"] for p in processes] == [proc.pid]
    stack = stack_capture.rank_stack("probe-node", processes[0])
    assert (stack.rank, stack.state, stack.top.func if stack.top else None) == (3, "S", "wait_for_peers")
    assert stack.flight_seq == 5 and processes[0]["flight"]["position"] == {"seq": 5, "op": "nccl:all_reduce"}
    assert "b64" not in processes[0]["flight"]  # the dump's bytes are not kept


def test_the_probe_without_py_spy_still_reports_state_and_says_why(tmp_path: Path) -> None:
    proc = _rank(tmp_path)
    try:
        os.kill(proc.pid, signal.SIGSTOP)
        time.sleep(0.2)
        report = _probe(str(tmp_path / "no-py-spy"))
    finally:
        _stop(proc)
    process = report["processes"][0]  # type: ignore[index]
    assert process["state"] == "T" and "py-spy not found" in process["pyspy"]["error"]


def test_hostile_probe_output_is_ignored_not_trusted() -> None:
    good = {"node": "n1", "processes": [{"pid": 5, "rank": 0, "state": "S", "pyspy": {"text": "garbage\n"}}]}
    out = "\n".join(
        [
            "noise from the node",
            stack_capture.MARK + "{not json",
            stack_capture.MARK + json.dumps([1, 2]),
            stack_capture.MARK + json.dumps({"node": "n2", "processes": ["x", {"pid": "NaN?"}]}),
            "prefix " + stack_capture.MARK + json.dumps(good),
        ]
    )
    taken = stack_capture.read_output(out, "cmd", 1.0, ("n1", "n2"))
    assert taken.status == "CAPTURED"  # n1's and n2's marked lines were read; the rest is ignored
    assert [(r.node, r.rank, r.pid, r.frames) for r in taken.ranks] == [("n2", None, 0, ()), ("n1", 0, 5, ())]


def test_probe_output_from_every_node_is_captured() -> None:
    reports = [
        {"node": "n1", "processes": [{"pid": 5, "rank": 0, "state": "S", "pyspy": {"text": "x"}}], "problems": []},
        {"node": "n2", "processes": [], "problems": ["no process of job 1 found on n2 as uid 0"]},
    ]
    out = "\n".join(stack_capture.MARK + json.dumps(r) for r in reports)
    taken = stack_capture.read_output(out, "cmd", 1.0, ("n1", "n2"))
    assert taken.status == "CAPTURED" and [r.rank for r in taken.ranks] == [0]
    assert taken.problems == ["no process of job 1 found on n2 as uid 0"]
    partial = stack_capture.read_output(out.splitlines()[0], "cmd", 1.0, ("n1", "n2"))
    assert partial.status == "PARTIAL" and partial.problems == ["no report from n2"]


def test_flight_recorder_file_is_opened_as_the_job_user_could(tmp_path: Path) -> None:
    """A job-controlled dump path never follows a symlink nor reads a file another user owns."""
    from app.evidence import stack_probe

    secret = tmp_path / "secret"
    secret.write_bytes(b"service secret")
    (tmp_path / "trace_0").symlink_to(secret)
    refused = stack_probe._flight(str(tmp_path / "trace_"), 0, 1024, os.getuid())
    assert "b64" not in refused and "not there" in refused["error"]
    (tmp_path / "own_0").write_bytes(b"dump")
    assert stack_probe._flight(str(tmp_path / "own_"), 0, 1024, os.getuid())["bytes"] == 4
    other = stack_probe._flight(str(tmp_path / "own_"), 0, 1024, os.getuid() + 1)
    assert "b64" not in other and other["error"].startswith("refused")
