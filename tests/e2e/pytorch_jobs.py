"""Real PyTorch jobs on the lab (examples/ddp.sbatch and hf.sbatch): launch one under a running worker, read back
its attempts through GraphQL and REST, and check what Recovery recorded. Shared by tests/e2e/test_real_pytorch.py and
tests/e2e/test_stack_capture.py."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.api.ids import to_global_id
from app.domain.decision.rootcause import decided_anomaly
from app.infra.context import AppContext
from app.main import create_app
from tests.e2e.harness import eventually, lab_context, running_worker, unique_environment
from tests.plugins import require
from tests.plugins.slurm_lab import SlurmLab

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
DEFAULT_TORCH_VENV = "/var/cache/recovery-lab/torch-venv"
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL"}
# The hang detector's thresholds for these jobs: short in the training loop, longer than the whole run before
# the first progress line (so only an armed detector can find the hang), and a gloo timeout well above both.
TRAININGLOOP_SECONDS = 8
PRETRAINING_SECONDS = 300
PG_TIMEOUT_SECONDS = 45
# The hang scenario's collective timeout: far above threshold + query delay, as NCCL's 10-30 min are in production.
HANG_PG_TIMEOUT_SECONDS = 300
HANG_QUERY_DELAY_SECONDS = 5.0  # RECOVERY_HANG_QUERY_DELAY (default 60 s), short to keep the suite's time

QUERY = """
query RealJob($jobId: Int!) {
  job(jobId: $jobId) {
    story { sentence }
    attempts(first: 10) {
      nodes {
        attemptIndex state nodes exitCode stdoutPath
        story { sentence happened decided result anomalyId }
        advice { operation rule reason exclusions evidence }
        checkpoints(first: 50) { nodes { kind iteration path line } }
        anomalies(first: 50) {
          nodes {
            id kind category node line lineNumber logPath outlook role details blamedNodes { node provenance }
          }
        }
      }
    }
  }
}
"""


@pytest.fixture(scope="module")
def torch_python() -> str:
    """The interpreter with torch, transformers and accelerate that `.ci/bootstrap` installs."""
    python = f"{os.environ.get('RECOVERY_TORCH_VENV') or DEFAULT_TORCH_VENV}/bin/python"
    probe = "import torch, transformers, accelerate; print(torch.__version__, transformers.__version__)"
    try:
        result = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=120, check=False)
    except OSError as exc:
        require("real PyTorch", f"{python}: {exc} (run .ci/bootstrap)")
    if result.returncode != 0:
        require("real PyTorch", f"{python} cannot import torch/transformers/accelerate: {result.stderr[-500:]}")
    return python


@dataclasses.dataclass
class Checks:
    """Every expectation of one scenario, so a failing run lists all that did not hold, not just the first."""

    scenario: str
    failed: list[str] = dataclasses.field(default_factory=list)
    passed: list[str] = dataclasses.field(default_factory=list)

    def expect(self, ok: object, what: str, seen: object = None) -> bool:
        (self.passed if ok else self.failed).append(what if ok else f"{what} (seen: {seen!r})")
        return bool(ok)

    def verdict(self) -> None:
        summary = f"{self.scenario}: {len(self.passed)} checks held, {len(self.failed)} did not"
        print(summary, *(f"  ok   {p}" for p in self.passed), *(f"  FAIL {f}" for f in self.failed), sep="\n")
        if self.failed:
            pytest.fail(summary + ":\n" + "\n".join(f"- {f}" for f in self.failed), pytrace=False)


@dataclasses.dataclass
class Run:
    """One job as the API reports it, with its output file and how long it took."""

    job_id: int
    job: dict[str, Any]
    attempts: list[dict[str, Any]]
    rest: list[dict[str, Any]]
    output: str
    seconds: float

    def anomalies(self, index: int, kind: str | None = None) -> list[dict[str, Any]]:
        found = self.attempts[index]["anomalies"]["nodes"] if index < len(self.attempts) else []
        return [a for a in found if kind is None or a["kind"] == kind]

    def loads(self, index: int) -> list[dict[str, Any]]:
        found = self.attempts[index]["checkpoints"]["nodes"] if index < len(self.attempts) else []
        return [c for c in found if c["kind"] == "loaded"]

    def cited(self, index: int) -> dict[str, Any] | None:
        """The anomaly attempt `index`'s story cites (by the line number and file it names), if any."""
        happened = (self.attempts[index]["story"] or {}).get("happened", "")
        match = re.search(r" at line (\d+) of (\S+)", happened)
        if not match:
            return None
        number, name = int(match.group(1)), match.group(2)
        return next(
            (
                a
                for a in self.anomalies(index)
                if a["lineNumber"] == number and (a["logPath"] or "").rsplit("/", 1)[-1] == name
            ),
            None,
        )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _comment(environment: str, *, max_requeue_times: int, trainingloop_seconds: float = TRAININGLOOP_SECONDS) -> str:
    """The user guide's APS directive in act mode, with the hang thresholds of these jobs."""
    body = {
        "workflow_id": f"wf-{uuid.uuid4().hex[:6]}",
        "environment": environment,
        "mode": "act",
        "auto_resume_mode": "requeue",
        "max_requeue_times": max_requeue_times,
        "log_file_paths_shared_across_attempts": True,
        "anomaly_detection_config": {
            "log_based_timeout_enabled": True,
            "log_based_timeout_threshold_pretraining": PRETRAINING_SECONDS,
            "log_based_timeout_threshold_trainingloop": trainingloop_seconds,
        },
    }
    return json.dumps({"APS": body}, separators=(",", ":"))


def _script(example: str, comment: str) -> str:
    """The example batch script as a job author submits it, with this test's own policy comment."""
    text = (EXAMPLES / example).read_text()
    replaced, count = re.subn(r"^#SBATCH --comment=.*$", lambda _: f"#SBATCH --comment='{comment}'", text, flags=re.M)
    assert count == 1, f"{example} has no --comment directive"
    return replaced


@dataclasses.dataclass
class Api:
    """The service's GraphQL and REST, in this process, on the test's database."""

    http: httpx.AsyncClient

    async def job(self, job_id: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        response = await self.http.post("/graphql", json={"query": QUERY, "variables": {"jobId": job_id}})
        body = response.json()
        assert response.status_code == 200 and not body.get("errors"), body
        rest = await self.http.get(f"/v1/jobs/by-scheduler-id/{job_id}")
        assert rest.status_code == 200, rest.text
        return body["data"]["job"], rest.json()["attempts"]


@contextlib.asynccontextmanager
async def _api(ctx: AppContext) -> AsyncIterator[Api]:
    settings = dataclasses.replace(ctx.settings, dev_no_auth=True)
    app = create_app(settings, ctx=AppContext(settings=settings, engine=ctx.engine, sessions=ctx.sessions))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as http:
        yield Api(http)


async def run_job(
    ctx: AppContext,
    lab: SlurmLab,
    python: str,
    *,
    example: str,
    train_args: str,
    attempts: int,
    max_requeue_times: int = 1,
    trainingloop_seconds: float = TRAININGLOOP_SECONDS,
    timeout: float = 300,
    **settings: Any,
) -> Run:
    """Submit the example with `train_args`, let the real worker act until the job has ended after `attempts`
    attempts (or ended for good), and read it back through GraphQL and REST (`settings`: the service's own)."""
    env = unique_environment()
    # The production lease length (the harness's 3 s is for failover tests): training processes share this
    # machine's cores with the worker, and a lease lapsing between renewals fences off the very requeue-hold
    # these tests are about (seen as "lease no longer ours; not sending requeue_hold", the job never retried).
    settings.setdefault("lease_seconds", 15.0)
    wctx = lab_context(ctx, env, log_dirs=(str(lab.test_dir()),), collector_poll_interval=0.3, **settings)
    started = time.monotonic()
    comment = _comment(env, max_requeue_times=max_requeue_times, trainingloop_seconds=trainingloop_seconds)
    script = _script(example, comment)
    async with running_worker(wctx, lab):
        job_id = lab.submit(
            script,
            PYTHON=python,
            PROGRAM_DIR=str(EXAMPLES),
            RDZV_HOST="127.0.0.1",  # the lab's nodes are emulated on this machine
            RDZV_PORT=str(_free_port()),
            TRAIN_ARGS=train_args,
        )

        ended_at: list[float] = []

        async def ended() -> int | None:
            """Slurm's restart count once the job has ended after `attempts` attempts, or has sat ended 30 s."""
            state = lab.state(job_id)
            restarts = int(lab.scontrol_show(job_id).get("Restarts", "0") or 0)
            if state not in TERMINAL:
                ended_at.clear()
                return None
            ended_at.append(ended_at[0] if ended_at else time.monotonic())
            settled = time.monotonic() - ended_at[0] > 30  # no Advice restarted it (what some checks are about)
            return restarts + 1 if restarts + 1 >= attempts or settled else None

        seen = await eventually(ended, timeout=timeout, what=f"job {job_id} ended after {attempts} attempt(s)")
        async with _api(wctx) as api:

            async def recorded() -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
                """The observer has recorded every attempt and the last one's end (and its Advice, if failed)."""
                job, rest = await api.job(job_id)
                nodes = job["attempts"]["nodes"] if job else []
                if len(nodes) < seen or nodes[-1]["state"] not in TERMINAL:
                    return None
                waited = time.monotonic() - settle_from
                # GraphQL and REST are read one after the other while the worker still records (a retry's
                # checkpoint load, say): read again until both tell the same stories, or 20 s have passed (then
                # the checks report the difference)
                told = [(a.get("story") or {}).get("sentence") for a in nodes]
                agree = told == [(a.get("story") or {}).get("sentence") for a in rest[: len(told)]]
                done = nodes[-1]["state"] == "COMPLETED" or nodes[-1]["advice"]
                return (job, rest) if (done and agree) or waited > 20 else None

            settle_from = time.monotonic()
            job, rest = await eventually(recorded, timeout=60, what=f"job {job_id}'s end recorded")
    # each attempt's own file (the examples write <name>-<job id>-<attempt>.log), then Slurm's --output file
    files = sorted(lab.test_dir().glob(f"*-{job_id}-*.log")) + sorted(lab.test_dir().glob(f"*-{job_id}.log"))
    output = "".join(f"==> {path.name} <==\n{path.read_text(errors='replace')}" for path in files)
    captures = os.environ.get("RECOVERY_TEST_CAPTURES_DIR")
    if captures:
        name = os.environ.get("PYTEST_CURRENT_TEST", "job").split("::")[-1].split(" ")[0]
        (Path(captures) / f"{name}.log").write_text(output)
    return Run(job_id, job, job["attempts"]["nodes"], rest, output, time.monotonic() - started)


def check_story_cites_the_decision(checks: Checks, run: Run, index: int, origin: str) -> dict[str, Any] | None:
    """The story of attempt `index` cites the anomaly whose line is the origin (never Recovery's own doing), the
    one its Advice was decided on (the Advice's evidence refs: the root cause, else the signal's anomaly)."""
    attempt = run.attempts[index]
    happened = (attempt["story"] or {}).get("happened", "")
    cited = run.cited(index)
    checks.expect(cited is not None, f"attempt {index}'s story cites a recorded anomaly by line", happened)
    check_cites_the_decided_anomaly(checks, run, index)
    if cited is not None:
        said = f"{cited['line'] or ''}\n{(cited['details'] or {}).get('detail') or ''}"  # a traceback's error line
        checks.expect(re.search(origin, said), f"the cited anomaly is the origin /{origin}/", said)
        checks.expect(
            not re.search(r"Terminated|got signal: 15|SIGTERM|CANCELLED", cited["line"] or ""),
            "the cited anomaly is not a line Recovery's requeue-hold caused",
            cited["line"],
        )
    rest_story = run.rest[index]["story"]["sentence"] if index < len(run.rest) else None
    checks.expect(rest_story == attempt["story"]["sentence"], "REST tells the same story as GraphQL", rest_story)
    return cited


def check_cites_the_decided_anomaly(checks: Checks, run: Run, index: int) -> None:
    """The story's anomalyId (GraphQL) is the anomaly the Advice was decided on, and the cited line is that one's."""
    attempt = run.attempts[index]
    refs = ((attempt.get("advice") or {}).get("evidence") or {}).get("refs") or []
    decided = decided_anomaly([str(r) for r in refs])
    expected = to_global_id("Anomaly", decided) if decided is not None else None
    said = (attempt["story"] or {}).get("anomalyId")
    checks.expect(
        decided is not None and said == expected, f"attempt {index}'s story cites the decided anomaly", (said, refs)
    )
    cited = run.cited(index)
    checks.expect(
        cited is not None and cited["id"] == said, f"attempt {index}'s story sentence names that anomaly's line", cited
    )
    after = run.anomalies(index, "AFTER_RECOVERY_ACTED")
    checks.expect(
        all(a["id"] != said for a in after), f"attempt {index}'s story cites no line after Recovery acted", None
    )
    checks.expect(
        all(a["role"] == "after Recovery acted" and a["outlook"] is None for a in after),
        f"attempt {index}'s lines after Recovery acted are kept apart (role, no outlook)",
        [(a["role"], a["outlook"], a["line"]) for a in after],
    )
    if after:
        print(f"attempt {index}: {len(after)} line(s) kept apart as after Recovery acted")


def check_consequences_marked(checks: Checks, run: Run, index: int, root: dict[str, Any] | None) -> None:
    """Every other crash of the attempt is a known consequence or printed after Recovery acted."""
    if root is None:
        return
    others = [a for a in run.anomalies(index, "CRASH") if a is not root and a["line"] != root["line"]]
    unmarked = [a["line"] for a in others if (a["details"] or {}).get("role") != "consequence" and a["kind"] == "CRASH"]
    checks.expect(not unmarked, f"attempt {index}'s other crash lines are marked as consequences", unmarked)


def check_resumed(checks: Checks, run: Run, index: int, iteration: int) -> None:
    """Attempt `index` completed and its checkpoint load was recorded once, at `iteration`."""
    checks.expect(len(run.attempts) > index, f"attempt {index} ran", len(run.attempts))
    if len(run.attempts) <= index:
        return
    checks.expect(run.attempts[index]["state"] == "COMPLETED", f"attempt {index} completed", run.attempts[index])
    loads = run.loads(index)
    checks.expect(
        [c["iteration"] for c in loads] == [iteration],
        f"attempt {index}'s checkpoint load recorded once, at iteration {iteration}",
        [(c["iteration"], c["line"]) for c in loads],
    )
    result = (run.attempts[index - 1]["story"] or {}).get("result", "")
    checks.expect(
        f"loaded checkpoint iteration {iteration}" in result,
        f"attempt {index - 1}'s story says attempt {index} loaded checkpoint iteration {iteration}",
        result,
    )


def check_node_provenance(checks: Checks, run: Run, index: int, root: dict[str, Any]) -> None:
    """The root cause's node is shown with how it was found: its own line names it, or srun's task layout said."""
    named = root["node"] and root["node"] in (root["line"] or "")
    source = (root["details"] or {}).get("nodeFrom") or ""
    checks.expect(named or source, f"attempt {index}'s root-cause node has a provenance", root)
    happened = (run.attempts[index]["story"] or {}).get("happened", "")
    checks.expect(named or source in happened, f"attempt {index}'s story shows where its node came from", happened)


def fault_node(run: Run, index: int = 0, node_index: int = 1) -> str:
    """The node the faulty process ran on: SLURM_NODEID `node_index` of the attempt's (sorted) node list."""
    return sorted(run.attempts[index]["nodes"])[node_index]
