"""Issue 25 on the real Slurm lab: every rank's stack is captured before Recovery ends a hung RUNNING attempt.

Real PyTorch jobs (examples/ddp.sbatch + ddp_train.py, DDP over gloo, 2 nodes x 1 torchrun) hang three ways on
the second node: the rank sleeps in its own Python before the gradient all-reduce (`--fault hang`), it stops
itself with SIGSTOP (`--fault sigstop`), or it blocks opening a FIFO nobody writes (`--fault fifo`). The real worker
finds the hang, captures the stacks through `srun --overlap` with the real py-spy, judges them, and restarts the
job as before; everything is read back through GraphQL and REST. The capture's failure modes (a user Slurm refuses,
a node whose slurmd does not answer, a job that ends during the capture) run the real probe against a plain job.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from app.infra.context import AppContext
from tests.e2e.harness import eventually, lab_context, running_worker, unique_environment
from tests.e2e.pytorch_jobs import (
    EXAMPLES,
    HANG_PG_TIMEOUT_SECONDS,
    HANG_QUERY_DELAY_SECONDS,
    Checks,
    _api,
    _comment,
    _free_port,
    _script,
    check_resumed,
    fault_node,
    run_job,
)
from tests.e2e.pytorch_jobs import torch_python as real_torch_python
from tests.plugins.slurm_lab import SlurmLab
from worker import stack_capture

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.real_framework]

torch_python = real_torch_python  # the same fixture: the lab jobs' interpreter with torch

PYSPY = str(Path(sys.executable).parent / "py-spy")  # the test extra's py-spy (the operator guide: install on nodes)

CAPTURE_QUERY = """
query Stacks($jobId: Int!) {
  job(jobId: $jobId) {
    attempts(first: 5) {
      nodes {
        attemptIndex state nodes
        advice { operation reason exclusions evidence }
        story { happened }
        anomalies(first: 50) { nodes { kind category node outlook message blamedNodes { node provenance } } }
        stackCapture {
          status mode command durationMs bytes nodesAsked nodesAnswered merged sentence judgment problems
          groups ranks
        }
      }
    }
  }
}
"""


async def _captured(ctx: AppContext, job_id: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(GraphQL attempts, REST attempts) with their stack captures."""
    async with _api(ctx) as api:
        response = await api.http.post("/graphql", json={"query": CAPTURE_QUERY, "variables": {"jobId": job_id}})
        body = response.json()
        assert response.status_code == 200 and not body.get("errors"), body
        rest = await api.http.get(f"/v1/jobs/by-scheduler-id/{job_id}")
        assert rest.status_code in {200, 404}, rest.text  # 404: not registered yet
    job = body["data"]["job"]
    return (job["attempts"]["nodes"] if job else []), (rest.json()["attempts"] if rest.status_code == 200 else [])


async def _hang(ctx: AppContext, lab: SlurmLab, python: str, fault: str, step: int = 7) -> tuple[Any, Checks, dict]:
    run = await run_job(
        ctx,
        lab,
        python,
        example="ddp.sbatch",
        train_args=f"--fault {fault} --fault-step {step} --pg-timeout {HANG_PG_TIMEOUT_SECONDS}",
        attempts=2,
        hang_query_delay=HANG_QUERY_DELAY_SECONDS,
        stack_capture_pyspy=PYSPY,
    )
    checks = Checks(f"ddp {fault}: stacks before the restart (job {run.job_id}, {run.seconds:.0f} s)")
    attempts, rest = await _captured(ctx, run.job_id)
    first = attempts[0] if attempts else {}
    capture = first.get("stackCapture") or {}
    print(f"capture: {capture.get('status')} in {capture.get('durationMs')} ms; merged: {capture.get('merged')}")
    print(f"judgment: {capture.get('sentence')}; problems: {capture.get('problems')}")
    checks.expect(capture.get("status") == "CAPTURED", "attempt 0's stacks were captured from every node", capture)
    ranks = capture.get("ranks") or []
    checks.expect(sorted(r.get("rank") for r in ranks) == [0, 1], "both ranks' stacks are there", ranks)
    checks.expect(all(r.get("frames") for r in ranks), "every rank has Python frames (py-spy)", ranks)
    checks.expect(
        sorted(capture.get("nodesAnswered") or []) == sorted(first.get("nodes") or ["?"]),
        "every node of the allocation answered",
        (capture.get("nodesAnswered"), first.get("nodes")),
    )
    checks.expect(capture.get("mode") == "act", "taken under the act mode's Advice", capture.get("mode"))
    judgment = capture.get("judgment") or {}
    node = fault_node(run) if run.attempts else "?"
    checks.expect(judgment.get("rank") == 1, "the judgment names rank 1 as the one that held the others back", judgment)
    checks.expect(judgment.get("node") == node, f"... on its node {node}", judgment)
    groups = capture.get("groups") or []
    outliers = [g for g in groups if g.get("outlier")]
    checks.expect(
        len(groups) == 2 and [o.get("ranks") for o in outliers] == [["rank 1"]],
        "merged stacks: two groups, rank 1 the outlier",
        groups,
    )
    waiting = [g for g in groups if not g.get("outlier")]
    checks.expect(
        waiting and re.search(r"backward|all_reduce|autograd", waiting[0].get("where") or ""),
        "rank 0 waits in the gradient all-reduce (autograd's backward)",
        waiting,
    )
    reason = (first.get("advice") or {}).get("reason") or ""
    checks.expect(
        "rank 1" in reason and node in reason, "the Advice's reason names rank 1 and its node (the stacks)", reason
    )
    rest_capture = (rest[0] if rest else {}).get("stackCapture") or {}
    checks.expect(
        rest_capture.get("sentence") == capture.get("sentence") and rest_capture.get("reports"),
        "REST shows the same capture, with the nodes' raw reports",
        rest_capture.get("sentence"),
    )
    happened = (first.get("story") or {}).get("happened") or ""
    checks.expect(
        "rank 1 on " + node + " held the others back" in happened, "the story says which rank on which node", happened
    )
    stack_anomalies = [a for a in first.get("anomalies", {}).get("nodes", []) if a["kind"] == "STACK"]
    checks.expect(len(stack_anomalies) == 1, "the judgment is recorded as one STACK anomaly", stack_anomalies)
    checks.expect((first.get("advice") or {}).get("operation") == "RESTART", "attempt 0: RESTART as before", first)
    check_resumed(checks, run, 1, 5)
    return run, checks, capture


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_rank_sleeping_in_python_is_named_with_its_frame_application_outlook(
    ctx: AppContext, slurm_framework_lab: SlurmLab, torch_python: str
) -> None:
    """The second node's rank sleeps in ddp_train.py's `main` before the all-reduce: its own Python code."""
    run, checks, capture = await _hang(ctx, slurm_framework_lab, torch_python, "hang")
    judgment = capture.get("judgment") or {}
    checks.expect(
        re.search(r"main in ddp_train\.py:\d+", judgment.get("where") or ""),
        "the outlier's frame: main in ddp_train.py:<line>",
        judgment,
    )
    checks.expect(judgment.get("outlook") == "application", "outlook application (the program's own code)", judgment)
    checks.expect(not judgment.get("blameNode"), "its node is not blamed", judgment)
    advice = run.attempts[0].get("advice") or {}
    checks.expect(not advice.get("exclusions"), "no node excluded", advice.get("exclusions"))
    checks.verdict()


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_rank_stopped_with_sigstop_is_named_in_state_t(
    ctx: AppContext, slurm_framework_lab: SlurmLab, torch_python: str
) -> None:
    """The second node's rank SIGSTOPs itself: py-spy reads it without attaching; its state is T."""
    run, checks, capture = await _hang(ctx, slurm_framework_lab, torch_python, "sigstop")
    judgment = capture.get("judgment") or {}
    outlier: dict[str, Any] = next((r for r in capture.get("ranks") or [] if r.get("rank") == 1), {})
    checks.expect(outlier.get("state") == "T", "rank 1 is in state T (stopped)", outlier)
    checks.expect("stopped" in (judgment.get("why") or ""), "the judgment says it was stopped", judgment)
    checks.expect(re.search(r"ddp_train\.py:\d+", judgment.get("where") or ""), "... where: ddp_train.py", judgment)
    checks.verdict()


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_rank_blocked_on_a_fifo_blames_its_node(
    ctx: AppContext, slurm_framework_lab: SlurmLab, torch_python: str
) -> None:
    """The second node's rank blocks in the kernel opening a FIFO nobody writes: blocked I/O, its node is blamed
    with provenance `stack` and excluded from the retry."""
    run, checks, capture = await _hang(ctx, slurm_framework_lab, torch_python, "fifo")
    judgment = capture.get("judgment") or {}
    node = fault_node(run) if run.attempts else "?"
    checks.expect(
        re.search(r"read_shard_from in ddp_train\.py:\d+", judgment.get("where") or ""),
        "the outlier's frame: read_shard_from in ddp_train.py",
        judgment,
    )
    checks.expect("I/O" in (judgment.get("why") or ""), "the judgment says blocked I/O (wchan)", judgment)
    checks.expect(judgment.get("outlook") == "infrastructure", "outlook infrastructure", judgment)
    attempts, _ = await _captured(ctx, run.job_id)
    stack = [a for a in attempts[0]["anomalies"]["nodes"] if a["kind"] == "STACK"]
    blamed = [b for a in stack for b in a.get("blamedNodes") or []]
    checks.expect(blamed == [{"node": node, "provenance": "stack"}], f"{node} blamed with provenance stack", blamed)
    advice = attempts[0].get("advice") or {}
    checks.expect(node in (advice.get("exclusions") or []), f"the retry excludes {node}", advice)
    checks.expect(node not in (attempts[1]["nodes"] if len(attempts) > 1 else [node]), "attempt 1 ran elsewhere", None)
    checks.verdict()


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_observe_mode_captures_the_stacks_and_sends_nothing(
    ctx: AppContext, slurm_framework_lab: SlurmLab, torch_python: str
) -> None:
    """The same sleeping rank under an observe-mode policy: the stacks are captured (read-only) and no command is
    sent; the job keeps hanging until the test cancels it."""
    env = unique_environment()
    wctx = lab_context(
        ctx,
        env,
        log_dirs=(str(slurm_framework_lab.test_dir()),),
        collector_poll_interval=0.3,
        hang_query_delay=HANG_QUERY_DELAY_SECONDS,
        stack_capture_pyspy=PYSPY,
    )
    comment = _comment(env, max_requeue_times=1).replace('"mode":"act"', '"mode":"observe"')
    async with running_worker(wctx, slurm_framework_lab):
        job_id = slurm_framework_lab.submit(
            _script("ddp.sbatch", comment),
            PYTHON=torch_python,
            PROGRAM_DIR=str(EXAMPLES),
            RDZV_HOST="127.0.0.1",
            RDZV_PORT=str(_free_port()),
            TRAIN_ARGS=f"--fault hang --fault-step 7 --pg-timeout {HANG_PG_TIMEOUT_SECONDS}",
        )

        async def captured() -> dict[str, Any] | None:
            attempts, _ = await _captured(wctx, job_id)
            return (attempts[0].get("stackCapture") if attempts else None) or None

        capture = await eventually(captured, timeout=240, what=f"job {job_id}'s stacks captured in observe mode")
        state = slurm_framework_lab.state(job_id)
    attempts, _ = await _captured(wctx, job_id)
    checks = Checks(f"observe mode (job {job_id})")
    checks.expect(capture.get("mode") == "observe", "taken under the observe-mode Advice", capture.get("mode"))
    checks.expect(capture.get("status") == "CAPTURED", "captured from every node", capture)
    checks.expect((capture.get("judgment") or {}).get("rank") == 1, "rank 1 named", capture.get("judgment"))
    checks.expect(state == "RUNNING", "nothing was sent: the job still runs", state)
    checks.expect(len(attempts) == 1, "no restart", len(attempts))
    checks.verdict()


# ---------------------------------------------------------------- the capture's failures, on a plain job

PLAIN_JOB = """#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --time=00:05:00
srun bash -c 'RANK=$SLURM_PROCID exec {python} -c "import time
def wait_for_peer():
    time.sleep(600)
wait_for_peer()"'
"""


def _running(lab: SlurmLab) -> tuple[int, list[str]]:
    job_id = lab.submit(PLAIN_JOB.format(python=sys.executable))
    deadline = time.monotonic() + 60
    while lab.state(job_id) != "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.3)
    assert lab.state(job_id) == "RUNNING"
    nodes = subprocess.run(
        [str(lab.bin_dir / "squeue"), "-h", "-j", str(job_id), "-o", "%N"],
        env=lab.env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    hosts = subprocess.run(
        [str(lab.bin_dir / "scontrol"), "show", "hostnames", nodes], env=lab.env(), capture_output=True, text=True
    ).stdout.split()
    time.sleep(1.0)  # the tasks have started their Python
    return job_id, hosts


def _settings(ctx: AppContext, lab: SlurmLab, **changes: Any) -> Any:
    return dataclasses.replace(ctx.settings, slurm_bin_dir=str(lab.bin_dir), stack_capture_pyspy=PYSPY, **changes)


async def test_plain_job_capture_names_each_rank_and_frame(ctx: AppContext, slurm_lab: SlurmLab) -> None:
    job_id, hosts = _running(slurm_lab)
    taken = await stack_capture.capture(
        _settings(ctx, slurm_lab), job_id=job_id, nodes=tuple(hosts), env=slurm_lab.env()
    )
    assert taken.status == "CAPTURED", taken.problems
    assert sorted((r.rank, r.node) for r in taken.ranks) == [(0, hosts[0]), (1, hosts[1])]
    assert all(r.top is not None and r.top.func == "wait_for_peer" for r in taken.ranks), taken.ranks
    assert all(r.state == "S" and "sleep" in r.wchan for r in taken.ranks), taken.ranks


async def test_capture_refused_by_slurm_is_failed_not_raised(
    ctx: AppContext, slurm_lab: SlurmLab, tmp_path: Path
) -> None:
    """srun as a user who does not own the job: Slurm refuses it; the capture says FAILED and why."""
    job_id, hosts = _running(slurm_lab)
    wrapper = tmp_path / "srun-as-nobody"
    wrapper.write_text(
        f'#!/bin/sh\nexec setpriv --reuid=nobody --regid=nogroup --clear-groups {slurm_lab.bin_dir}/srun "$@"\n'
    )
    wrapper.chmod(0o755)
    if os.geteuid() != 0:
        pytest.skip("needs root to run srun as another user")
    taken = await stack_capture.capture(
        _settings(ctx, slurm_lab), job_id=job_id, nodes=tuple(hosts), srun=str(wrapper), env=slurm_lab.env()
    )
    assert taken.status == "FAILED", taken
    assert any(re.search(r"denied|not permitted|Access|Invalid user|permission", p, re.I) for p in taken.problems)


async def test_node_that_does_not_answer_is_partial_within_the_bound(ctx: AppContext, slurm_lab: SlurmLab) -> None:
    """The slurmd of the job's second node is stopped: the capture ends at its bound, with the first node's stacks."""
    job_id, hosts = _running(slurm_lab)
    pid = slurm_lab.daemon_pid(f"slurmd-{hosts[1]}")
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        taken = await stack_capture.capture(
            _settings(ctx, slurm_lab, stack_capture_timeout=6.0), job_id=job_id, nodes=tuple(hosts), env=slurm_lab.env()
        )
        took = time.monotonic() - started
    finally:
        os.kill(pid, signal.SIGCONT)
    print(f"capture with a silent node: {taken.status} in {took:.1f} s: {taken.problems}")
    assert taken.status == "PARTIAL", taken  # one srun per node: the node that answered is there
    assert [(r.rank, r.node) for r in taken.ranks] == [(0, hosts[0])], taken.ranks
    assert any(hosts[1] in p and "no answer" in p for p in taken.problems), taken.problems


async def test_job_that_ends_during_the_capture(ctx: AppContext, slurm_lab: SlurmLab) -> None:
    """The job is cancelled while the probe runs: the capture records what it got, never raises."""
    job_id, hosts = _running(slurm_lab)
    settings = _settings(ctx, slurm_lab)
    task = asyncio.create_task(stack_capture.capture(settings, job_id=job_id, nodes=tuple(hosts), env=slurm_lab.env()))
    await asyncio.sleep(0.05)
    subprocess.run([str(slurm_lab.bin_dir / "scancel"), str(job_id)], env=slurm_lab.env(), check=True)
    taken = await task
    print(f"capture of a job ending: {taken.status}: {taken.problems}")
    assert taken.status in {"CAPTURED", "PARTIAL", "FAILED"}, taken
    again = await stack_capture.capture(settings, job_id=job_id, nodes=tuple(hosts), env=slurm_lab.env())
    assert again.status == "FAILED" and again.problems, again
