"""Real PyTorch jobs on the real Slurm lab, judged by the real service and read back through the API.

The jobs are the examples job authors copy (examples/ddp.sbatch + ddp_train.py: torchrun, DistributedDataParallel
over gloo on CPU, 2 nodes x 1 torchrun; examples/hf.sbatch + hf_train.py: a Hugging Face Trainer), submitted with
the user guide's directives (`--requeue`, the APS policy in act mode), on a lab of their own (`slurm_framework_lab`,
its own xdist group: minutes of training do not hold up the shared lab's tests) whose nodes have host names of
their own, as on a real cluster. Every line the service reads is what torch,
torchrun, gloo, srun, tqdm and transformers print. The assertions are issue 24's: the root cause is the process
that failed first (its node, not a survivor's `Connection reset by peer`), the story cites the evidence the
Advice was decided on, the hang detector arms on the program's own progress lines (the hang is found before the
collective timeout), a checkpoint load is recorded once per retry, a repeated failure is recognised as the same,
NaN is detected, and a clean run has no anomaly.

Each test gathers all its checks and fails listing every one that did not hold (so one run shows them all).
The jobs' interpreter is the virtual environment `.ci/bootstrap` installs torch, transformers and accelerate into
(RECOVERY_TORCH_VENV, default /var/cache/recovery-lab/torch-venv); without it these tests fail under CI and skip
elsewhere, saying so. RECOVERY_TEST_CAPTURES_DIR, when set, receives each job's output file.
"""

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

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.real_framework]

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
                return (job, rest) if nodes[-1]["state"] == "COMPLETED" or nodes[-1]["advice"] or waited > 20 else None

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


# ---------------------------------------------------------------- torchrun + DDP over gloo


# Both databases: "the same failure" compares fingerprints stored as JSON across attempts, and the story's cited
# anomaly is read back through each one's queries.
@pytest.mark.parametrize("database", ["sqlite", "postgres"], indirect=True)
async def test_ddp_exception_on_one_rank_repeated_is_recognised_as_the_same(
    ctx: AppContext, slurm_framework_lab: SlurmLab, torch_python: str
) -> None:
    """The process on the second node gets a batch of the wrong shape at step 7 on every attempt."""
    run = await run_job(
        ctx,
        slurm_framework_lab,
        torch_python,
        example="ddp.sbatch",
        train_args="--fault raise --fault-step 7 --fault-attempts all",
        attempts=2,
        max_requeue_times=2,
    )
    checks = Checks(f"ddp raise x2 (job {run.job_id}, {run.seconds:.0f} s)")
    origin = r"mat1 and mat2 shapes cannot be multiplied"
    checks.expect(re.search(origin, run.output), "the job printed torch's own error", run.output[-300:])
    checks.expect(len(run.attempts) == 2, "exactly two attempts (the repeat stopped it)", len(run.attempts))
    first, second = (run.attempts + [{}, {}])[:2]
    checks.expect((first.get("advice") or {}).get("operation") == "RESTART", "attempt 0: RESTART", first.get("advice"))
    for index in range(min(2, len(run.attempts))):
        root = check_story_cites_the_decision(checks, run, index, origin)
        if root is not None:
            checks.expect(root["category"] == "PYTHON_TRACEBACK", f"attempt {index}'s root cause category", root)
            checks.expect(
                root["node"] == fault_node(run, index),
                f"attempt {index}'s root cause is on the failing process's node {fault_node(run, index)}",
                root["node"],
            )
            check_node_provenance(checks, run, index, root)
            checks.expect(
                (root["details"] or {}).get("fingerprint"), f"attempt {index}'s root cause has a fingerprint", root
            )
        check_consequences_marked(checks, run, index, root)
    advice = second.get("advice") or {}
    checks.expect(
        (advice.get("operation"), advice.get("rule")) == ("TERMINATE", "application_failure_repeated"),
        "attempt 1: TERMINATE as the same application failure repeated",
        advice,
    )
    checks.expect(
        "the same application failure as attempt 0" in (advice.get("reason") or ""),
        "the Advice's reason names the repeat",
        advice.get("reason"),
    )
    checks.expect(
        "at iteration 6" in (advice.get("reason") or ""),
        "the reason knows where: the resumed attempt's first step counter past its checkpoint armed it",
        advice.get("reason"),
    )
    roots = [run.cited(i) for i in range(min(2, len(run.attempts)))]
    prints = [(r or {}).get("details", {}).get("fingerprint") for r in roots]
    checks.expect(
        len(prints) == 2 and prints[0] and prints[0] == prints[1], "both root causes share a fingerprint", prints
    )
    loads = run.loads(1) if len(run.attempts) > 1 else []
    checks.expect([c["iteration"] for c in loads] == [5], "attempt 1's load recorded once, at iteration 5", loads)
    checks.verdict()


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)  # the stored evidence is the same on PostgreSQL
async def test_ddp_rank_killed_blames_the_killed_rank_not_the_survivor(
    ctx: AppContext, slurm_framework_lab: SlurmLab, torch_python: str
) -> None:
    """The process on the second node is SIGKILLed at step 7; the survivor's gloo sees its peer vanish."""
    run = await run_job(
        ctx,
        slurm_framework_lab,
        torch_python,
        example="ddp.sbatch",
        train_args="--fault kill --fault-step 7",
        attempts=2,
    )
    checks = Checks(f"ddp kill (job {run.job_id}, {run.seconds:.0f} s)")
    checks.expect(re.search(r"exitcode\s*:\s*-9|Signal 9 \(SIGKILL\)", run.output), "torchrun reported SIGKILL", None)
    advice = run.attempts[0].get("advice") or {}
    checks.expect(advice.get("operation") == "RESTART", "attempt 0: RESTART", advice)
    root = check_story_cites_the_decision(checks, run, 0, r"-9|SIGKILL|[Ss]ignal 9")
    if root is not None:
        checks.expect(
            root["node"] == fault_node(run),
            f"the root cause is on the killed process's node {fault_node(run)}, not the survivor's",
            root["node"],
        )
        check_node_provenance(checks, run, 0, root)
        checks.expect(
            not re.search(r"[Cc]onnection (reset|closed) by peer|Read error", root["line"] or ""),
            "the root cause is not the survivor's peer-connection error",
            root["line"],
        )
    check_consequences_marked(checks, run, 0, root)
    check_resumed(checks, run, 1, 5)
    checks.verdict()


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)  # the stored evidence is the same on PostgreSQL
async def test_ddp_rank_hanging_before_a_collective_is_found_before_the_collective_timeout(
    ctx: AppContext, slurm_framework_lab: SlurmLab, torch_python: str
) -> None:
    """The process on the second node sleeps before the all-reduce of step 7; gloo would time out after 300 s.
    Found at the training-loop threshold plus the query delay after the last line (8 + 5 s), by the detector the
    program's own `iteration N | loss X` lines armed."""
    run = await run_job(
        ctx,
        slurm_framework_lab,
        torch_python,
        example="ddp.sbatch",
        train_args=f"--fault hang --fault-step 7 --pg-timeout {HANG_PG_TIMEOUT_SECONDS}",
        attempts=2,
        hang_query_delay=HANG_QUERY_DELAY_SECONDS,
    )
    checks = Checks(f"ddp hang (job {run.job_id}, {run.seconds:.0f} s)")
    hangs = run.anomalies(0, "NO_PROGRESS")
    checks.expect(hangs, "attempt 0's hang recorded (NO_PROGRESS): the detector armed on `iteration N | loss X`", None)
    if hangs:
        details = hangs[0]["details"] or {}
        silent = details.get("silentSeconds") or 0
        print(f"hang found {silent:.1f} s after the last line (threshold {TRAININGLOOP_SECONDS} s)")
        checks.expect(
            details.get("trainingLoop") and silent < HANG_PG_TIMEOUT_SECONDS / 4,
            f"found in the training loop, well before gloo's {HANG_PG_TIMEOUT_SECONDS} s collective timeout",
            details,
        )
        checks.expect("iteration 6 |" in (hangs[0]["line"] or ""), "the hang cites the last progress line", hangs[0])
    timeouts = re.findall(r".*Timed out waiting.*", run.output.split("loaded checkpoint from", 1)[0])
    checks.expect(not timeouts, "no collective timed out before the retry", timeouts[:1])
    check_cites_the_decided_anomaly(checks, run, 0)
    story = run.attempts[0]["story"] or {}
    checks.expect("hung" in story.get("happened", ""), "attempt 0's story says it hung", story.get("happened"))
    advice = run.attempts[0].get("advice") or {}
    checks.expect(advice.get("operation") == "RESTART", "attempt 0: RESTART", advice)
    checks.expect(
        "before any progress marker" not in (advice.get("reason") or ""),
        "the reason knows the progress the job printed",
        advice.get("reason"),
    )
    check_resumed(checks, run, 1, 5)
    checks.verdict()


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)  # the stored evidence is the same on PostgreSQL
async def test_ddp_gloo_collective_timeout_is_a_transient_collective_timeout(
    ctx: AppContext, slurm_framework_lab: SlurmLab, torch_python: str
) -> None:
    """The process on the second node sleeps before the all-reduce of step 7 and the job's hang threshold is set
    above gloo's 12 s timeout, so gloo's own `Timed out waiting 12000ms` on the survivor ends the run: one category
    with NCCL's watchdog timeout (a collective timed out), a transient outlook, restarted and resumed."""
    run = await run_job(
        ctx,
        slurm_framework_lab,
        torch_python,
        example="ddp.sbatch",
        train_args="--fault hang --fault-step 7 --pg-timeout 12",
        attempts=2,
        trainingloop_seconds=PRETRAINING_SECONDS,
    )
    checks = Checks(f"ddp gloo timeout (job {run.job_id}, {run.seconds:.0f} s)")
    origin = r"Timed out waiting \d+ms"
    checks.expect(re.search(origin, run.output), "gloo printed its own collective timeout", run.output[-300:])
    checks.expect(not run.anomalies(0, "NO_PROGRESS"), "no hang reported (the threshold is above gloo's)", None)
    root = check_story_cites_the_decision(checks, run, 0, origin)
    if root is not None:
        checks.expect(root["category"] == "NCCL_TIMEOUT", "the collective timeout's category", root["category"])
        checks.expect(root["outlook"] == "transient", "a collective timeout is transient", root["outlook"])
    advice = run.attempts[0].get("advice") or {}
    checks.expect(advice.get("operation") == "RESTART", "attempt 0: RESTART", advice)
    checks.expect("outlook transient" in (advice.get("reason") or ""), "the reason says transient", advice)
    check_consequences_marked(checks, run, 0, root)
    check_resumed(checks, run, 1, 5)
    checks.verdict()


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)  # the stored evidence is the same on PostgreSQL
async def test_ddp_data_loader_stall_before_the_first_checkpoint_is_found(
    ctx: AppContext, slurm_framework_lab: SlurmLab, torch_python: str
) -> None:
    """The process on the second node waits at step 3 for a batch its DataLoader worker never delivers; the other
    waits in the all-reduce. Two printed steps arm the detector; there is no checkpoint yet, so the retry starts
    from scratch and completes."""
    run = await run_job(
        ctx,
        slurm_framework_lab,
        torch_python,
        example="ddp.sbatch",
        train_args=f"--fault stall --fault-step 3 --pg-timeout {HANG_PG_TIMEOUT_SECONDS}",
        attempts=2,
        hang_query_delay=HANG_QUERY_DELAY_SECONDS,
    )
    checks = Checks(f"ddp data loader stall (job {run.job_id}, {run.seconds:.0f} s)")
    hangs = run.anomalies(0, "NO_PROGRESS")
    checks.expect(hangs, "attempt 0's hang recorded (NO_PROGRESS) after two printed steps", run.anomalies(0))
    if hangs:
        details = hangs[0]["details"] or {}
        silent = details.get("silentSeconds") or 0
        print(f"stall found {silent:.1f} s after the last line (threshold {TRAININGLOOP_SECONDS} s)")
        checks.expect(details.get("trainingLoop"), "in the training loop's phase", details)
        checks.expect(silent < HANG_PG_TIMEOUT_SECONDS / 4, "well before the collective timeout", silent)
        checks.expect("iteration 2 |" in (hangs[0]["line"] or ""), "the hang cites the last progress line", hangs[0])
    checks.expect(not run.anomalies(0, "CRASH"), "no crash recorded before Recovery acted", run.anomalies(0, "CRASH"))
    story = run.attempts[0]["story"] or {}
    checks.expect("hung" in story.get("happened", ""), "attempt 0's story says it hung", story.get("happened"))
    advice = run.attempts[0].get("advice") or {}
    checks.expect(advice.get("operation") == "RESTART", "attempt 0: RESTART", advice)
    check_cites_the_decided_anomaly(checks, run, 0)
    checks.expect(len(run.attempts) == 2 and run.attempts[1]["state"] == "COMPLETED", "attempt 1 completed", None)
    checks.expect(not run.loads(1), "attempt 1 loaded nothing (no checkpoint was saved)", run.loads(1))
    checks.verdict()


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)  # the stored evidence is the same on PostgreSQL
async def test_ddp_nan_loss_is_detected(ctx: AppContext, slurm_framework_lab: SlurmLab, torch_python: str) -> None:
    """The process on the second node gets NaN input from step 12: the all-reduced loss prints `loss nan`."""
    run = await run_job(
        ctx,
        slurm_framework_lab,
        torch_python,
        example="ddp.sbatch",
        train_args="--fault nan --fault-step 12 --save-every 10 --steps 30",
        attempts=2,
    )
    checks = Checks(f"ddp nan (job {run.job_id}, {run.seconds:.0f} s)")
    checks.expect(re.search(r"iteration 12 \| loss nan", run.output), "the program printed `loss nan`", None)
    nans = [a for a in run.anomalies(0) if a["category"] == "NAN_LOSS"]
    checks.expect(nans, "attempt 0's NaN loss detected (NAN_LOSS)", [a["category"] for a in run.anomalies(0)])
    if nans:
        checks.expect("loss nan" in (nans[-1]["line"] or ""), "on the program's own `loss nan` line", nans[-1]["line"])
    check_story_cites_the_decision(checks, run, 0, r"loss nan")
    checks.verdict()


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)  # the stored evidence is the same on PostgreSQL
async def test_ddp_failure_before_the_first_progress_line(
    ctx: AppContext, slurm_framework_lab: SlurmLab, torch_python: str
) -> None:
    """The process on the second node fails in its very first step: no progress line, no checkpoint; the retry
    starts from scratch (nothing to load) and completes."""
    run = await run_job(
        ctx,
        slurm_framework_lab,
        torch_python,
        example="ddp.sbatch",
        train_args="--fault raise --fault-step 1",
        attempts=2,
    )
    checks = Checks(f"ddp raise at step 1 (job {run.job_id}, {run.seconds:.0f} s)")
    first_file = run.output.split("==> ", 2)[1] if run.output.count("==> ") > 1 else run.output
    checks.expect("iteration 1 |" not in first_file, "attempt 0 printed no progress line", first_file[:300])
    advice = run.attempts[0].get("advice") or {}
    checks.expect(advice.get("operation") == "RESTART", "attempt 0: RESTART", advice)
    root = check_story_cites_the_decision(checks, run, 0, r"mat1 and mat2 shapes cannot be multiplied")
    if root is not None:
        checks.expect(root["category"] == "PYTHON_TRACEBACK", "root cause category", root["category"])
        checks.expect(root["node"] == fault_node(run), f"the root cause is on {fault_node(run)}", root["node"])
        check_node_provenance(checks, run, 0, root)
    check_consequences_marked(checks, run, 0, root)
    checks.expect(not run.anomalies(0, "NO_PROGRESS"), "no hang: nothing armed the detector", run.anomalies(0))
    checks.expect(not run.attempts[0]["checkpoints"]["nodes"], "no checkpoint in attempt 0", run.attempts[0])
    checks.expect(len(run.attempts) == 2 and run.attempts[1]["state"] == "COMPLETED", "attempt 1 completed", None)
    checks.expect(not run.loads(1), "attempt 1 loaded nothing (there was nothing to load)", run.loads(1))
    checks.verdict()


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)  # the stored evidence is the same on PostgreSQL
async def test_ddp_exception_during_checkpoint_save(
    ctx: AppContext, slurm_framework_lab: SlurmLab, torch_python: str
) -> None:
    """At the checkpoint of step 10 the process on the second node's torch.save raises (pickle cannot save its
    state); the other waits at the save's barrier, so iter_10 is never written and the retry resumes from 5."""
    run = await run_job(
        ctx,
        slurm_framework_lab,
        torch_python,
        example="ddp.sbatch",
        train_args="--fault save --fault-step 10 --steps 15",
        attempts=2,
    )
    checks = Checks(f"ddp save fails (job {run.job_id}, {run.seconds:.0f} s)")
    origin = r"PicklingError|Can't pickle"
    checks.expect(re.search(origin, run.output), "torch.save raised pickle's own error", run.output[-300:])
    saves = [c["iteration"] for c in run.attempts[0]["checkpoints"]["nodes"] if c["kind"] == "saved"]
    checks.expect(saves == [5], "attempt 0's save of iteration 5 recorded, none of 10", saves)
    advice = run.attempts[0].get("advice") or {}
    checks.expect(advice.get("operation") == "RESTART", "attempt 0: RESTART", advice)
    root = check_story_cites_the_decision(checks, run, 0, origin)
    if root is not None:
        checks.expect(root["category"] == "PYTHON_TRACEBACK", "root cause category", root["category"])
        checks.expect(root["node"] == fault_node(run), f"the root cause is on {fault_node(run)}", root["node"])
        check_node_provenance(checks, run, 0, root)
    check_consequences_marked(checks, run, 0, root)
    checks.expect(not run.anomalies(0, "NO_PROGRESS"), "no hang reported", run.anomalies(0, "NO_PROGRESS"))
    check_resumed(checks, run, 1, 5)
    checks.verdict()


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)  # the stored evidence is the same on PostgreSQL
async def test_ddp_clean_run_completes_without_anomaly(
    ctx: AppContext, slurm_framework_lab: SlurmLab, torch_python: str
) -> None:
    run = await run_job(
        ctx, slurm_framework_lab, torch_python, example="ddp.sbatch", train_args="--fault none", attempts=1
    )
    checks = Checks(f"ddp clean (job {run.job_id}, {run.seconds:.0f} s)")
    checks.expect([a["state"] for a in run.attempts] == ["COMPLETED"], "one attempt, completed", run.attempts)
    checks.expect(not run.anomalies(0), "no anomaly", run.anomalies(0))
    checks.expect(run.attempts[0].get("advice") is None, "no Advice", run.attempts[0].get("advice"))
    saves = [c["iteration"] for c in run.attempts[0]["checkpoints"]["nodes"] if c["kind"] == "saved"]
    checks.expect(sorted(saves) == [5, 10, 15, 20], "the four saves recorded", (saves, run.attempts[0]["stdoutPath"]))
    checks.verdict()


# ---------------------------------------------------------------- Hugging Face Trainer


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)  # the stored evidence is the same on PostgreSQL
async def test_hf_trainer_exception_then_resume_from_checkpoint(
    ctx: AppContext, slurm_framework_lab: SlurmLab, torch_python: str
) -> None:
    """The Trainer fails at step 8 on the first attempt; the retry resumes from checkpoint-5 and completes."""
    run = await run_job(
        ctx,
        slurm_framework_lab,
        torch_python,
        example="hf.sbatch",
        train_args="--fault raise --fault-step 8",
        attempts=2,
    )
    checks = Checks(f"hf raise (job {run.job_id}, {run.seconds:.0f} s)")
    checks.expect("Saving model checkpoint to" in run.output, "the Trainer printed its own save lines", None)
    checks.expect(
        "Resuming training from checkpoint with epoch 0 and global step 5" in run.output,
        "the Trainer resumed by itself from checkpoint-5",
        None,
    )
    saves = [c["iteration"] for c in run.attempts[0]["checkpoints"]["nodes"] if c["kind"] == "saved"]
    checks.expect(saves == [5], "attempt 0's save of checkpoint-5 recorded", saves)
    hangs = run.anomalies(0, "NO_PROGRESS")
    checks.expect(not hangs, "no hang reported for a job that printed tqdm progress", hangs)
    advice = run.attempts[0].get("advice") or {}
    checks.expect(advice.get("operation") == "RESTART", "attempt 0: RESTART", advice)
    root = check_story_cites_the_decision(checks, run, 0, r"ValueError: corrupt sample")
    if root is not None:
        checks.expect(root["category"] == "PYTHON_TRACEBACK", "root cause category", root["category"])
    check_resumed(checks, run, 1, 5)
    checks.expect(
        not [a for a in run.anomalies(1) if a["kind"] == "CRASH"], "the resumed attempt has no crash", run.anomalies(1)
    )
    checks.verdict()


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)  # the stored evidence is the same on PostgreSQL
async def test_hf_trainer_nan_loss_is_detected(
    ctx: AppContext, slurm_framework_lab: SlurmLab, torch_python: str
) -> None:
    """The weights turn to NaN before step 6: the Trainer logs `'grad_norm': 'nan'` itself (its default
    logging_nan_inf_filter hides the loss: `'loss': '0'`)."""
    run = await run_job(
        ctx,
        slurm_framework_lab,
        torch_python,
        example="hf.sbatch",
        train_args="--fault nan --fault-step 6 --save-steps 20 --steps 30",
        attempts=2,
    )
    checks = Checks(f"hf nan (job {run.job_id}, {run.seconds:.0f} s)")
    checks.expect("'grad_norm': 'nan'" in run.output, "the Trainer logged a nan gradient norm", None)
    nans = [a for a in run.anomalies(0) if a["category"] == "NAN_LOSS"]
    checks.expect(nans, "attempt 0's NaN detected (NAN_LOSS)", [a["category"] for a in run.anomalies(0)])
    if nans:
        checks.expect("'grad_norm': 'nan'" in (nans[-1]["line"] or ""), "on the Trainer's own line", nans[-1]["line"])
    checks.verdict()
