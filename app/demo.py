"""`recovery demo`: a real local Slurm, the service, and two example jobs that fail and are recovered."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from sqlalchemy import select

from app.audit.models import AuditEvent
from app.infra.config import Settings
from app.infra.context import AppContext
from app.infra.log_format import set_cluster as set_log_cluster
from app.infra.log_masking import mask_url
from app.infra.resources import resource_dir

EXAMPLES = resource_dir("examples")
OPERATIONS = resource_dir("graphql") / "operations"
SCENARIOS = ("crash", "hang")


def demo_settings(base: Settings, *, data_dir: str, bind: str) -> Settings:
    """Settings for the demo: lab cluster, act allowed on the lab partition, short hang query delay."""
    overrides: dict[str, Any] = dict(
        data_dir=data_dir,
        database_url=f"sqlite+aiosqlite:///{Path(data_dir) / 'recovery.db'}",
        environment="lab",
        cluster="lab",
        managed_partitions=("debug",),
        acknowledge_scheduler_actions=True,
        poll_interval=0.5,
        hang_query_delay=5.0,
        bind=bind,
    )
    if not base.oidc_issuer:
        overrides["dev_no_auth"] = True
    return dataclasses.replace(base, **overrides)


@dataclass
class Submitted:
    """One example job the demo submitted and follows."""

    scenario: str
    job_id: int
    log: Path
    done: bool = False
    recovered: bool = False
    outcome: str = ""


@dataclass
class _Held:
    """An attempt's anomalies not yet told: they wait for the Advice that names their root cause."""

    since: float
    events: list[AuditEvent] = field(default_factory=list)


@dataclass
class Narrator:
    """Turns audit events into the lines a person watching the demo wants to read.

    An attempt's anomalies wait (at most HOLD_SECONDS) for its Advice: one DETECTED line tells the anomaly the
    Advice was decided on, the root cause, and how many follow-on lines came with it; later lines of the same
    attempt and kind are follow-ons too (counted in the story, not narrated).
    """

    out: TextIO
    started: float = field(default_factory=time.monotonic)
    job_ids: set[int] = field(default_factory=set)
    held: dict[tuple[int, int], _Held] = field(default_factory=dict)
    told: dict[tuple[int, int], set[str]] = field(default_factory=dict)  # kinds already narrated per attempt

    HOLD_SECONDS = 8.0

    def line(self, text: str) -> None:
        elapsed = time.monotonic() - self.started
        print(f"[{elapsed:6.1f}s] {text}", file=self.out, flush=True)

    def event(self, event: AuditEvent, *, cited: int | None = None) -> None:
        """Narrate one event; `cited` is the anomaly id an advice.created event's Advice was decided on."""
        if event.slurm_job_id is not None and event.slurm_job_id not in self.job_ids:
            return
        key = None
        if event.slurm_job_id is not None and event.attempt_index is not None:
            key = (event.slurm_job_id, event.attempt_index)
        if event.event_type == "anomaly.detected" and key is not None:
            kind = str((event.payload or {}).get("kind") or "")
            if kind in self.told.get(key, set()):
                return  # a follow-on line of a cause already told
            self.held.setdefault(key, _Held(time.monotonic())).events.append(event)
            return
        if event.event_type == "advice.created" and key is not None:
            self.tell_detected(key, cited=cited)
        self._print(event)

    def tell_detected(self, key: tuple[int, int], *, cited: int | None = None) -> None:
        """One DETECTED line for an attempt's held anomalies: the cited root cause (else the first), + follow-ons."""
        held = self.held.pop(key, None)
        if held is None or not held.events:
            return
        ids = [(e.payload or {}).get("anomalyId") for e in held.events]
        cause = held.events[ids.index(cited)] if cited in ids else held.events[0]
        kinds = {str((e.payload or {}).get("kind") or "") for e in held.events}
        self.told.setdefault(key, set()).update(kinds)
        others = len(held.events) - 1
        more = f" (+{others} follow-on line{'s' if others != 1 else ''})" if others else ""
        self._print(cause, suffix=more)

    def flush(self, *, older_than: float | None = None) -> None:
        """Tell what waited longer than `older_than` seconds for an Advice (everything when None)."""
        now = time.monotonic()
        for key in [k for k, h in self.held.items() if older_than is None or now - h.since >= older_than]:
            self.tell_detected(key)

    def _print(self, event: AuditEvent, *, suffix: str = "") -> None:
        where = f"job {event.slurm_job_id}" + (f"/{event.attempt_index}" if event.attempt_index is not None else "")
        marks = {
            "job.registered": "enrolled",
            "policy.rejected": "NOT enrolled",
            "attempt.registered": "new attempt",
            "attempt.state_changed": "state",
            "anomaly.detected": "DETECTED",
            "evidence.after_recovery_acted": "AFTER ACTING",  # Recovery's own doing: shown apart, not an anomaly
            "checkpoint.saved": "checkpoint",
            "checkpoint.loaded": "checkpoint",
            "advice.created": "ADVICE",
            "advice.updated": "ADVICE",
            "reconciliation.converged": "VERIFIED",
            "reconciliation.abandoned": "ABANDONED",
        }
        label = marks.get(event.event_type)
        if label is None and event.event_type.startswith("scheduler."):
            label = "SLURM"
        if label is None and event.level in ("WARNING", "ERROR"):
            label = event.level
        if label is None:
            return
        self.line(f"{where:<14} {label:<12} {event.message}{suffix}")


def _lab_up(out: TextIO) -> dict[str, str]:
    from app.lab.cli import run as lab_run

    buffer = io.StringIO()
    rc = lab_run("up", nodes=3, dbd=False, lab_dir=None, out=buffer)
    if rc != 0:
        raise RuntimeError(f"`recovery lab up` failed (exit {rc}); see the messages above")
    exports = dict(re.findall(r"^export (\w+)=(\S+)$", buffer.getvalue(), re.M))
    os.environ.update(exports)
    return exports


def _prepare_run_dir(lab_dir: str) -> Path:
    run_dir = Path(lab_dir) / "demo" / time.strftime("%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=True)
    for name in ("train.py", "crash.sbatch", "hang.sbatch"):
        shutil.copy(EXAMPLES / name, run_dir / name)
    return run_dir


async def _first_look(runner: Any, bound: float = 60.0) -> None:
    """Wait (bounded) for the observer's first complete look at Slurm: a job that ended before it is adopted as
    history, not recovered (app/domain/admission/adoption.py), so the examples are submitted after it."""
    from worker.observer import Observer  # lazily, like the other worker imports of the demo

    observer = next((s for s in runner.services if isinstance(s, Observer)), None)
    deadline = time.monotonic() + bound
    while observer is not None and observer.state.watching_since is None and time.monotonic() < deadline:
        await asyncio.sleep(0.1)


def submit_example(run_dir: Path, scenario: str) -> Submitted:
    """sbatch one example script from the run directory; returns its Slurm job id."""
    # Submitted from the run directory: the scripts find train.py through SLURM_SUBMIT_DIR.
    result = subprocess.run(
        ["sbatch", "--parsable", f"--chdir={run_dir}", str(run_dir / f"{scenario}.sbatch")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        cwd=run_dir,
    )
    if result.returncode != 0:
        raise RuntimeError(f"sbatch {scenario}.sbatch failed: {result.stderr.strip()}")
    job_id = int(result.stdout.strip().split(";")[0])
    return Submitted(scenario, job_id, run_dir / f"example-{scenario}-{job_id}.log")


async def follow(
    ctx: AppContext,
    narrator: Narrator,
    jobs: list[Submitted],
    *,
    timeout: float,
    is_done: Callable[[AppContext, Submitted], Awaitable[tuple[bool, str] | None]],
) -> bool:
    """Print audit events of the demo's jobs as they happen until every job is done (or timeout)."""
    from app.feed import queries as feed

    position = 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        async with ctx.sessions() as session:
            entries = await feed.read_since(session, after_id=position, topics=["audit"], limit=500)
            ids = [e.entity_id for e in entries if e.entity_id is not None]
            events = (
                (await session.scalars(select(AuditEvent).where(AuditEvent.id.in_(ids)).order_by(AuditEvent.id))).all()
                if ids
                else []
            )
            cited = await _cited_anomalies(session, events)
        for event in events:
            narrator.event(event, cited=cited.get(event.id))
        narrator.flush(older_than=narrator.HOLD_SECONDS)
        if entries:
            position = entries[-1].id
        for job in jobs:
            if not job.done:
                verdict = await is_done(ctx, job)
                if verdict:
                    job.done = True
                    job.recovered, job.outcome = verdict
                    narrator.line(f"job {job.job_id:<10} DONE         {job.scenario} example: {job.outcome}")
                    for sentence in await _story_sentences(ctx, job.job_id):
                        narrator.line(f"job {job.job_id:<10} STORY        {sentence}")
        if all(job.done for job in jobs):
            narrator.flush()
            return True
        await asyncio.sleep(0.3)
    return False


async def _cited_anomalies(session: Any, events: Sequence[AuditEvent]) -> dict[int, int]:
    """For each advice.created event, the anomaly its Advice was decided on (audit event id -> anomaly id)."""
    from app.advice.models import Advice

    by_advice = {
        int(e.payload["adviceId"]): e.id
        for e in events
        if e.event_type == "advice.created" and isinstance((e.payload or {}).get("adviceId"), int)
    }
    if not by_advice:
        return {}
    rows = await session.execute(select(Advice.id, Advice.anomaly_id).where(Advice.id.in_(by_advice)))
    return {by_advice[advice_id]: anomaly_id for advice_id, anomaly_id in rows if anomaly_id is not None}


async def _story_sentences(ctx: AppContext, slurm_job_id: int) -> list[str]:
    """Each attempt's story: it cites the anomaly its Advice was decided on (the root cause, or the hang)."""
    from app.advice import stories
    from app.jobs.models import Job

    async with ctx.sessions() as session:
        job_ids = list(
            (
                await session.scalars(
                    select(Job.id).where(Job.slurm_job_id == slurm_job_id, Job.cluster == ctx.settings.cluster)
                )
            ).all()
        )
        told = await stories.stories_of_jobs(session, job_ids=job_ids)
    return [t.story.sentence for rows in told.values() for t in rows]


async def recovered_and_completed(ctx: AppContext, job: Submitted) -> tuple[bool, str] | None:
    """(recovered?, what happened) once the job is settled; None while it is still in progress."""
    from app.jobs.models import Attempt

    async with ctx.sessions() as session:
        attempts = (
            await session.scalars(
                select(Attempt)
                .where(Attempt.slurm_job_id == job.job_id, Attempt.cluster == ctx.settings.cluster)
                .order_by(Attempt.attempt_index)
            )
        ).all()
    if not attempts:
        return None
    last = attempts[-1]
    if last.state == "COMPLETED":
        retries = len(attempts) - 1
        return (
            retries > 0,
            f"attempt {last.attempt_index} COMPLETED after {retries} automatic retr{'y' if retries == 1 else 'ies'}",
        )
    if last.state in ("FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "UNKNOWN") and last.attempt_index >= 1:
        return False, f"attempt {last.attempt_index} ended {last.state}"
    return None


def fresh_database(data_dir: str) -> bool:
    """Remove the previous demo's SQLite database (and its journal files); True when there was one."""
    found = False
    for suffix in ("", "-wal", "-shm", "-journal"):
        path = Path(data_dir) / f"recovery.db{suffix}"
        if path.exists():
            path.unlink()
            found = True
    return found


def lab_down_command(lab_dir: str | None) -> str:
    """The command that stops this demo's lab (naming its directory when it is not the default one)."""
    from app.lab.cli import DEFAULT_LAB_DIR

    if lab_dir and os.path.abspath(lab_dir) != os.path.abspath(DEFAULT_LAB_DIR):
        return f"recovery lab down --lab-dir {lab_dir}"
    return "recovery lab down"


# Short enough to read in a terminal: each attempt's state and story sentence.
STORY_QUERY = (
    "{ job(jobId: %d) { jobId story { sentence } "
    "attempts { edges { node { attemptIndex state story { sentence } } } } } }"
)


def graphql_request_body(operation: str, variables: dict[str, Any]) -> str:
    """A one-line JSON request body for a committed operation (comments dropped, spaces folded)."""
    text = (OPERATIONS / f"{operation}.graphql").read_text()
    query = " ".join(" ".join(line.split("#", 1)[0].split()) for line in text.splitlines()).strip()
    return json.dumps({"query": " ".join(query.split()), "variables": variables}, separators=(",", ":"))


def print_inspection_help(out: TextIO, settings: Settings, jobs: list[Submitted]) -> None:
    """The dashboard URL, how to log in, and the curl and GraphQL commands for the demo's jobs."""
    base = f"http://{settings.bind}{settings.url_prefix}"
    first = jobs[0].job_id if jobs else 1
    graphql_body = json.dumps({"query": STORY_QUERY % first})
    login = (
        "authentication is OFF for this local demo (RECOVERY_DEV_NO_AUTH; loopback only)"
        if settings.dev_no_auth
        else f"log in through {settings.oidc_issuer}"
    )
    print(
        f"""
Dashboard:  {base}/dashboard/workflow      ({login})
Audit:      {base}/dashboard/audit?job={first}
Timeline:   {base}/dashboard/jobs/{first}/attempts/0/timeline
Story:      recovery status {first} --server {base}    (one sentence per attempt; `recovery watch` follows it live)

Inspect the attempts from a shell (the user guide's commands, as written):
  export RECOVERY_HTTP_URL={base}
  export RECOVERY_ACCESS_TOKEN=dev   # any value in dev mode; a real token from your identity provider otherwise
  JOB_ID={first}
  curl --fail-with-body \\
    --header "Authorization: Bearer $RECOVERY_ACCESS_TOKEN" \\
    "$RECOVERY_HTTP_URL/v1/jobs/by-scheduler-id/$JOB_ID"
  curl --fail-with-body --get "$RECOVERY_HTTP_URL/v1/advice" \\
    --header "Authorization: Bearer $RECOVERY_ACCESS_TOKEN" \\
    --data-urlencode 'limit=100'

GraphQL (each attempt's story; explore everything in GraphiQL at {base}/graphql):
  curl -s "$RECOVERY_HTTP_URL/graphql" -H 'content-type: application/json' \\
    -H "Authorization: Bearer $RECOVERY_ACCESS_TOKEN" \\
    -d '{graphql_body}'
""",
        file=out,
        flush=True,
    )


async def run_demo(
    base: Settings,
    *,
    out: TextIO = sys.stdout,
    timeout: float = 300.0,
    keep_serving: bool = True,
    keep_db: bool = False,
) -> int:
    """Start lab + service, submit the examples, narrate what happens, then keep serving."""
    import uvicorn

    from app.auth import check_auth_configuration
    from app.infra.migrate import upgrade
    from app.main import create_app
    from worker.registry import build_services
    from worker.runner import WorkerRunner

    narrator = Narrator(out)
    narrator.line("starting the local Slurm lab (3 emulated nodes; installs Debian's slurm packages if missing) …")
    exports = _lab_up(out)
    lab_dir = exports.get("SLURM_LAB_DIR") or os.environ.get("RECOVERY_LAB_DIR") or "/tmp/recovery-lab"
    settings = demo_settings(base, data_dir=str(Path(base.data_dir) / "demo"), bind=base.bind)
    set_log_cluster(settings.cluster)  # the demo works on the lab cluster, not RECOVERY_CLUSTER
    check_auth_configuration(settings)
    narrator.line(f"Slurm is up (SLURM_CONF={exports.get('SLURM_CONF')})")
    if not keep_db and fresh_database(settings.data_dir):
        narrator.line("the previous demo's database was removed: this run starts with no history (--keep-db keeps it)")
    ctx = AppContext.open(settings)
    await upgrade(ctx.engine)
    narrator.line(f"database ready: {mask_url(settings.database_url)}")
    runner = WorkerRunner(ctx, build_services(ctx))
    app = create_app(settings, ctx=ctx, background=runner.run)
    server = uvicorn.Server(
        uvicorn.Config(app, host=settings.bind_host, port=settings.bind_port, log_level="warning", lifespan="on")
    )
    serving = asyncio.create_task(server.serve())
    while not server.started:
        if serving.done():
            await serving
            return 1
        await asyncio.sleep(0.05)
    narrator.line(
        f"service listening on http://{settings.bind}{settings.url_prefix}/ (API, dashboard and worker in one process)"
    )

    await _first_look(runner)
    run_dir = _prepare_run_dir(lab_dir)
    jobs = [submit_example(run_dir, scenario) for scenario in SCENARIOS]
    narrator.job_ids.update(job.job_id for job in jobs)
    for job in jobs:
        narrator.line(f"submitted examples/{job.scenario}.sbatch as job {job.job_id} (log: {job.log})")
    narrator.line(
        "watching: the crash example fails at step 25 after saving checkpoints; the hang example goes silent at step 22"
    )
    settled = await follow(ctx, narrator, jobs, timeout=timeout, is_done=recovered_and_completed)
    finished = settled and all(job.recovered for job in jobs)
    if finished:
        narrator.line("both examples were recovered automatically and completed from their checkpoints")
    elif settled:
        narrator.line("the examples ended without a full recovery; see the dashboard and docs/troubleshooting.md")
    else:
        narrator.line(f"not finished after {timeout:.0f} s; see the dashboard and docs/troubleshooting.md")
    print_inspection_help(out, settings, jobs)
    try:
        if keep_serving:
            print("Serving until you press Ctrl-C.", file=out, flush=True)
            await serving
        else:
            server.should_exit = True
            await serving
    finally:
        with contextlib.suppress(Exception):
            await ctx.close()
        # also on Ctrl-C: the lab outlives the demo, say how to stop it
        print(f"The Slurm lab is still running; stop it with: {lab_down_command(lab_dir)}", file=out, flush=True)
    return 0 if finished else 1
