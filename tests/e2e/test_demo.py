"""The README's run command end to end: `recovery demo` recovers a crash and a hang, and its printed commands work."""

import json
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.demo import graphql_request_body
from tests.plugins.slurm_lab import SlurmLab

pytestmark = pytest.mark.slurm
ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _json_documents(text: str) -> list[Any]:
    decoder = json.JSONDecoder()
    documents: list[Any] = []
    index = 0
    while True:
        while index < len(text) and text[index].isspace():
            index += 1
        if index >= len(text):
            return documents
        document, index = decoder.raw_decode(text, index)
        documents.append(document)


def _story(base: str, job_id: int) -> dict[str, Any]:
    response = httpx.post(
        f"{base}/graphql",
        content=graphql_request_body("RecoveryStory", {"jobId": job_id}),
        headers={"content-type": "application/json"},
        timeout=30,
    )
    response.raise_for_status()
    body = response.json()
    assert "errors" not in body, body
    return body["data"]["job"]


def _attempts(job: dict[str, Any]) -> list[dict[str, Any]]:
    return [edge["node"] for edge in job["attempts"]["edges"]]


def _nodes(connection: dict[str, Any]) -> list[dict[str, Any]]:
    return [edge["node"] for edge in connection["edges"]]


def test_demo_recovers_a_crash_and_a_hang(slurm_lab: SlurmLab, tmp_path: Path) -> None:
    port = _free_port()
    env = {
        **slurm_lab.env(),
        "RECOVERY_DATA_DIR": str(tmp_path),
        "RECOVERY_BIND": f"127.0.0.1:{port}",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("RECOVERY_OIDC_ISSUER", None)
    log_path = tmp_path / "demo.out"
    with log_path.open("w") as log:
        demo = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "demo", "--timeout", "400"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        deadline = time.monotonic() + 450
        while "Serving until you press Ctrl-C." not in log_path.read_text():
            assert demo.poll() is None, log_path.read_text()[-4000:]
            assert time.monotonic() < deadline, log_path.read_text()[-4000:]
            time.sleep(1)
        output = log_path.read_text()
        assert "both examples were recovered automatically and completed from their checkpoints" in output, output[
            -4000:
        ]
        crash_found = re.search(r"submitted examples/crash\.sbatch as job (\d+)", output)
        hang_found = re.search(r"submitted examples/hang\.sbatch as job (\d+)", output)
        assert crash_found is not None and hang_found is not None, output[-4000:]
        crash_id, hang_id = int(crash_found.group(1)), int(hang_found.group(1))
        for job_id in (crash_id, hang_id):  # one DETECTED line per cause, not one per follow-on line
            assert len(re.findall(rf"job {job_id}/0 +DETECTED", output)) == 1, output[-4000:]

        # The commands the demo printed, run exactly as printed.
        block = output.split("Inspect the attempts from a shell (the user guide's commands, as written):", 1)[1].split(
            "Serving until", 1
        )[0]
        commands = "\n".join(line for line in block.splitlines() if line.startswith("  "))
        shell = subprocess.run(["bash", "-euo", "pipefail", "-c", commands], capture_output=True, text=True, timeout=60)
        assert shell.returncode == 0, shell.stderr
        rest_attempts, rest_advice, graphql = _json_documents(shell.stdout)
        assert [a["attemptIndex"] for a in rest_attempts["attempts"]] == [0, 1]
        assert {a["jobId"] for a in rest_attempts["attempts"]} == {crash_id}
        assert any(a["jobId"] == crash_id and a["attemptIndex"] == 0 for a in rest_advice["advice"])
        assert graphql["data"]["job"]["jobId"] == crash_id

        base = f"http://127.0.0.1:{port}"
        crash = _story(base, crash_id)
        a0, a1 = _attempts(crash)
        assert (a0["state"], a0["exitCode"]) == ("FAILED", 1)
        categories = {anomaly["category"] for anomaly in _nodes(a0["anomalies"])}
        assert "NCCL_ERROR" in categories
        failing_node = a0["nodes"][0]
        advice = a0["advice"]
        assert advice["operation"] == "RESTART" and advice["reconciliation"]["disposition"] == "CONVERGED"
        assert advice["reconciliation"]["reason"] == "DESIRED_STATE_OBSERVED"
        assert failing_node in advice["exclusions"]
        assert failing_node not in a1["nodes"]
        steps = [(m["step"], m["status"]) for m in advice["reconciliation"]["milestones"]]
        assert ("requeue_hold", "SUCCEEDED") in steps and ("release", "SUCCEEDED") in steps
        assert a1["state"] == "COMPLETED"
        assert any(c["kind"] == "loaded" and c["iteration"] == 20 for c in _nodes(a1["checkpoints"]))

        hang = _story(base, hang_id)
        h0, h1 = _attempts(hang)
        assert "NO_PROGRESS" in {anomaly["kind"] for anomaly in _nodes(h0["anomalies"])}
        assert h0["advice"]["operation"] == "RESTART" and h0["advice"]["reconciliation"]["disposition"] == "CONVERGED"
        assert h1["state"] == "COMPLETED"
        assert any(c["kind"] == "loaded" for c in _nodes(h1["checkpoints"]))

        dashboard = httpx.get(f"{base}/dashboard/workflow", timeout=30)
        assert dashboard.status_code == 200 and "example-crash" in dashboard.text
    finally:
        demo.send_signal(signal.SIGINT)
        try:
            demo.wait(timeout=30)
        except subprocess.TimeoutExpired:
            demo.kill()
            demo.wait()
    assert "The Slurm lab is still running; stop it with: recovery lab down" in log_path.read_text()
