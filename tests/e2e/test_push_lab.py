"""End to end on the real Slurm lab through the push path: the service cannot read the job's output (its --output
is /dev/null, its own log file lies where no collector setting points), a collector tails that file and pushes
its lines with the OpenTelemetry SDK's OTLP/HTTP exporter to a running `recovery serve`; the worker decides on
the pushed crash, requeues held, releases, and the retry completes."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from markupsafe import escape
from sqlalchemy import select

from app.evidence.models import LogSource
from app.infra.context import AppContext
from app.ingest.models import PushStream
from tests.api.helpers import LiveServer, stop_server
from tests.e2e.harness import (
    advice_list,
    attempts,
    batch_script,
    eventually,
    lab_context,
    milestones,
    policy_comment,
    running_worker,
    unique_environment,
)
from tests.ingest.helpers import REAL_JOBS, otel_export, otel_records, push_server
from tests.plugins.database import Database
from tests.plugins.slurm_lab import SlurmLab

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

# The real ddp-kill run (tests/fixtures/real-jobs): rank 1 SIGKILLed at step 7 after a checkpoint at step 5, then
# the retry resumes from it. Each attempt writes its part to its own file, named as a collector's path pattern
# expects (job, attempt, node), and nothing to Slurm's --output.
BODY = """\
ATTEMPT="${SLURM_RESTART_COUNT:-0}"
LOG="$PWD/collected/push-$SLURM_JOB_ID-$ATTEMPT-$SLURMD_NODENAME.log"
if [ "$ATTEMPT" = 0 ]; then
  cat part-0.log >> "$LOG"
  sleep 10
  exit 1
fi
cat part-1.log >> "$LOG"
"""
NAME = re.compile(r"push-(\d+)-(\d+)-([\w.-]+)\.log")


@dataclass
class Collector:
    """A site's log agent, as Alloy's or the OTel Collector's file tailing does it: new complete lines of each file,
    labelled from the path (job, attempt, node), stamped with the time they were read, exported over OTLP/HTTP."""

    server: LiveServer
    directory: Path
    cluster: str
    offsets: dict[Path, int] = field(default_factory=dict)
    crash_sent_at: dict[int, float] = field(default_factory=dict)  # attempt -> wall time the traceback went out
    batches: int = 0

    def sweep(self) -> None:
        for path in sorted(self.directory.glob("push-*.log")):
            named = NAME.fullmatch(path.name)
            if named is None:
                continue
            job, attempt, node = named.groups()
            offset = self.offsets.get(path, 0)
            data = path.read_bytes()[offset:]
            end = data.rfind(b"\n") + 1
            if not end:
                continue
            lines = data[:end].decode("utf-8", "replace").split("\n")[:-1]
            resource = {
                "slurm.job.id": job,
                "slurm.job.attempt": attempt,
                "host.name": node,
                "log.file.path": str(path),
                "cluster": self.cluster,
            }
            sent = time.time()
            if otel_export(self.server, otel_records(lines, resource)):
                self.offsets[path] = offset + end
                self.batches += 1
                if any("Traceback (most recent call last)" in line for line in lines):
                    self.crash_sent_at.setdefault(int(attempt), sent)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await asyncio.to_thread(self.sweep)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.25)


@contextlib.asynccontextmanager
async def collecting(collector: Collector) -> AsyncIterator[Collector]:
    stop = asyncio.Event()
    task = asyncio.create_task(collector.run(stop))
    try:
        yield collector
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)


def graphql(server: LiveServer, query: str, **variables: Any) -> dict[str, Any]:
    answer = httpx.post(f"{server.url}/graphql", json={"query": query, "variables": variables}, timeout=30)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert not body.get("errors"), body
    return body["data"]


ATTEMPT = """
query($job: Int!, $index: Int!) {
  attempt(jobId: $job, attemptIndex: $index) {
    state exitCode
    advice { operation rule reason createdAt }
    anomalies(first: 50) { nodes { kind category logPath lineNumber line role } }
  }
}
"""


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_pushed_crash_of_an_unreadable_job_is_recovered(
    ctx: AppContext, database: Database, slurm_lab: SlurmLab, tmp_path: Path
) -> None:
    env = unique_environment()
    wctx = lab_context(ctx, env)
    cluster = wctx.settings.cluster
    directory = slurm_lab.test_dir()
    (directory / "collected").mkdir(exist_ok=True)
    lines = (REAL_JOBS / "ddp-kill.log").read_text().splitlines()
    split = next(i for i, line in enumerate(lines) if "attempt 1)" in line)
    (directory / "part-0.log").write_text("\n".join(lines[:split]) + "\n")
    (directory / "part-1.log").write_text("\n".join(lines[split:]) + "\n")
    script = batch_script(policy_comment(env), BODY, name="push-e2e").replace(
        "#SBATCH --output=out-%j.log", "#SBATCH --output=/dev/null"
    )
    server = push_server(database.url, tmp_path, cluster)
    collector = Collector(server, directory / "collected", cluster)
    try:
        async with running_worker(wctx, slurm_lab), collecting(collector):
            job_id = slurm_lab.submit(script)

            async def advised() -> Any:
                found = await advice_list(wctx, job_id)
                return found and found[0]

            advice = await eventually(advised, timeout=120, what="attempt 0's Advice recorded")
            recorded_at = time.time()

            async def retry_completed() -> Any:
                found = await attempts(wctx, job_id)
                return len(found) == 2 and found[1].state == "COMPLETED" and found

            a0, a1 = await eventually(retry_completed, timeout=240, what="the retry completed")

            async def retry_pushed() -> Any:  # the retry's lines reach the service too (its own stream)
                async with wctx.sessions() as session:
                    query = select(PushStream.lines).where(
                        PushStream.slurm_job_id == job_id, PushStream.attempt_label == 1
                    )
                    return (await session.scalar(query)) == len(lines) - split

            await eventually(retry_pushed, timeout=30, what="attempt 1's lines pushed")
        sent = collector.crash_sent_at.get(0)
        assert sent is not None, collector
        created = advice.created_at.replace(tzinfo=advice.created_at.tzinfo or dt.UTC).timestamp()
        print(
            f"\npush e2e: traceback line pushed -> Advice recorded {created - sent:.2f} s "
            f"(Advice seen by the poll after {recorded_at - sent:.2f} s), {collector.batches} OTLP batches"
        )

        assert [(m.step, m.status) for m in await milestones(wctx, job_id)] == [
            ("requeue_hold", "SUCCEEDED"),
            ("release", "SUCCEEDED"),
        ]
        first = graphql(server, ATTEMPT, job=job_id, index=0)["attempt"]
        second = graphql(server, ATTEMPT, job=job_id, index=1)["attempt"]
        assert first["advice"]["operation"] == "RESTART", first
        assert second["state"] == "COMPLETED", second
        crashes = [a for a in first["anomalies"]["nodes"] if a["kind"] == "CRASH"]
        assert crashes, first
        assert all(a["logPath"].startswith("push://") for a in first["anomalies"]["nodes"]), first
        rest = httpx.get(f"{server.url}/v1/jobs/by-scheduler-id/{job_id}", timeout=30)
        assert rest.status_code == 200, rest.text
        assert [(a["attemptIndex"], a["state"]) for a in rest.json()["attempts"]][-1] == (1, "COMPLETED")
        # nothing of this job came from a file: its only log sources are the pushed streams (and /dev/null, refused)
        async with wctx.sessions() as session:
            paths = set((await session.scalars(select(LogSource.path).where(LogSource.job_id == a0.job_id))).all())
        assert paths and all(p.startswith("push://") or p == "/dev/null" for p in paths), paths

        # the log view shows the pushed lines around an evidence line
        crash = next(a for a in crashes if a["lineNumber"])
        page = httpx.get(
            f"{server.url}/dashboard/jobs/{job_id}/attempts/0/log",
            params={"path": crash["logPath"], "line": crash["lineNumber"]},
            timeout=30,
        )
        assert page.status_code == 200, page.text[-2000:]
        assert f'id="L{crash["lineNumber"]}" class="target"' in page.text, page.text[-3000:]
        number = crash["lineNumber"]
        assert lines[number - 1].startswith(crash["line"][:60]), (number, crash)  # numbered as pushed, from 1
        for shown in lines[max(0, number - 5) : min(split, number + 5)]:  # its neighbours in attempt 0's file
            assert str(escape(shown)) in page.text, shown
    finally:
        stop_server(server)
