"""Job authors on the real lab try to read what they may not through Recovery (issue 22): nothing gets out.

Jobs run as a non-root user (submitted with `runuser`; slurmd runs as root and starts them as that
user). Their StdOut becomes (a) a symlink to a root-only secret, (a') a symlink to /proc/self/environ,
(b) a FIFO, (c) a file owned by another user that the job may write into. The real worker (observer,
collector, ...) runs in this process; the API and the dashboard answer in-process. Each file must be
refused with the right `log.refused` reason, visible through REST, GraphQL and the attempt page, and no
byte of the secret (or of the worker's environment) may reach any answer, page or log line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import pwd
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from app.audit.models import AuditEvent
from app.infra.context import AppContext
from app.jobs.models import Job
from app.main import create_app
from tests.e2e.harness import eventually, lab_context, policy_comment, running_worker, unique_environment
from tests.factories import events, rows
from tests.plugins.slurm_lab import SlurmLab

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.parametrize("database", ["sqlite"], indirect=True),
    pytest.mark.skipif(os.geteuid() != 0, reason="creates users and runs jobs as them: needs root"),
]

JOB_USER, OTHER_USER = "rcv-jobuser", "rcv-otheruser"
SECRET = f"LAB-SECRET-{uuid.uuid4().hex}"


def ensure_user(name: str) -> pwd.struct_passwd:
    """A system user without a home (created once; the lab's slurmd resolves it through this host's passwd)."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
            check=True,
            capture_output=True,
            timeout=30,
        )
        return pwd.getpwnam(name)


@pytest.fixture
def users() -> tuple[pwd.struct_passwd, pwd.struct_passwd]:
    return ensure_user(JOB_USER), ensure_user(OTHER_USER)


@pytest.fixture
def job_dir(users: tuple[pwd.struct_passwd, pwd.struct_passwd]) -> Iterator[Path]:
    """The job user's own directory (everyone may enter /tmp and it)."""
    path = Path(f"/tmp/rcv-job-files-{uuid.uuid4().hex[:8]}")
    path.mkdir(mode=0o755)
    os.chown(path, users[0].pw_uid, users[0].pw_gid)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def submit_as(lab: SlurmLab, user: str, directory: Path, script: str) -> int:
    """`sbatch` run by `user` (munge vouches for it), the script in the user's directory."""
    path = directory / f"job-{uuid.uuid4().hex[:6]}.sh"
    path.write_text(script)
    os.chmod(path, 0o755)
    result = subprocess.run(
        ["runuser", "-u", user, "--", str(lab.bin_dir / "sbatch"), "--parsable", f"--chdir={directory}", str(path)],
        env=lab.env(),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, f"sbatch as {user} failed: {result.stderr.strip()}"
    job_id = int(result.stdout.strip().split(";", 1)[0])
    lab.submitted.append(job_id)
    return job_id


def script(comment: str, output: Path, swap: str = "", line: str = "starting") -> str:
    """A job that writes a line to its StdOut, then (maybe) replaces the StdOut path, then waits."""
    return "\n".join(
        [
            "#!/bin/bash",
            "#SBATCH --job-name=job-files",
            f"#SBATCH --comment='{comment}'",
            f"#SBATCH --output={output}",
            "#SBATCH --open-mode=append",
            f"echo '{line}'",
            swap,
            "sleep 120",
            "",
        ]
    )


@contextlib.asynccontextmanager
async def api(ctx: AppContext) -> AsyncIterator[httpx.AsyncClient]:
    """The API and dashboard of this database, in this process (dev mode: every request is an operator)."""
    settings = dataclasses.replace(ctx.settings, dev_no_auth=True)
    app = create_app(settings, ctx=AppContext(settings=settings, engine=ctx.engine, sessions=ctx.sessions))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1", timeout=30
    ) as client:
        yield client


ATTEMPT_EVENTS = """
query($job: Int!) { attempt(jobId: $job, attemptIndex: 0) {
  stdoutPath auditEvents(first: 100) { nodes { eventType message payload } } } }
"""


async def test_symlink_fifo_and_foreign_stdout_are_refused_and_never_shown(
    ctx: AppContext,
    slurm_lab: SlurmLab,
    users: tuple[pwd.struct_passwd, pwd.struct_passwd],
    job_dir: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    caplog.set_level(logging.DEBUG, logger="recovery")
    job_user, other_user = users
    secret = tmp_path.parent / f"secret-{uuid.uuid4().hex[:6]}"  # root's 0600 file
    secret.write_text(f"{SECRET}\n" * 3)
    os.chmod(secret, 0o600)
    environ_marker = f"RCV_ENV_MARKER_{uuid.uuid4().hex}"
    os.environ[environ_marker] = SECRET  # only in os.environ: /proc/self/environ holds the start environment
    start_environment = Path("/proc/self/environ").read_bytes().split(b"\0")[0].decode(errors="replace")
    foreign = job_dir / "foreign.log"  # another user's file the job may write into
    foreign.write_text(f"{SECRET}\n")
    os.chown(foreign, other_user.pw_uid, other_user.pw_gid)
    os.chmod(foreign, 0o666)
    environment = unique_environment()
    lab_ctx = lab_context(ctx, environment, acknowledge_scheduler_actions=False, collector_poll_interval=0.3)
    comment = policy_comment(environment, mode="observe")
    crash = "RuntimeError: CUDA error: an illegal memory access was encountered"
    # case -> (StdOut name, what the job does to that path, the reason expected); the job's own first line
    # may be read before the swap, so only the foreign file carries a crash line that must never be read
    cases = {
        "secret": ("out-link.log", f"rm -f $OUT; ln -s {secret} $OUT", "symlink"),
        "environ": ("out-environ.log", "rm -f $OUT; ln -s /proc/self/environ $OUT", "symlink"),
        "fifo": ("out-fifo.log", "rm -f $OUT; mkfifo $OUT", "not-regular-file"),
        "foreign": ("foreign.log", "", "wrong-owner"),
    }
    expected = {case: reason for case, (_, _, reason) in cases.items()}
    try:
        async with running_worker(lab_ctx, slurm_lab):
            jobs: dict[str, int] = {}
            for case, (name, swap, _) in cases.items():
                output = job_dir / name
                text = script(
                    comment, output, f"OUT={output}; {swap}" if swap else "", crash if not swap else "starting"
                )
                jobs[case] = submit_as(slurm_lab, JOB_USER, job_dir, text)

            async def all_refused() -> dict[int, set[str]] | None:
                found: dict[int, set[str]] = {}
                for event in await events(lab_ctx, "log.refused"):
                    if event.slurm_job_id is not None:
                        found.setdefault(event.slurm_job_id, set()).add(event.payload["reason"])
                return found if all(job_id in found for job_id in jobs.values()) else None

            refused = await eventually(all_refused, timeout=120, what="log.refused for every job")
    finally:
        os.environ.pop(environ_marker, None)
    for case, job_id in jobs.items():
        assert expected[case] in refused[job_id], (case, refused[job_id])
    for job in await rows(lab_ctx, Job, Job.slurm_job_id.in_(list(jobs.values()))):
        assert job.user_id == job_user.pw_uid  # Slurm's UserId, stored at registration
    # once per (attempt, path, reason), however many ticks saw it
    keys = [
        (e.slurm_job_id, e.attempt_index, e.payload["file"], e.payload["reason"])
        for e in await events(lab_ctx, "log.refused")
    ]
    assert len(keys) == len(set(keys))
    # what every surface says, and that none of it holds a byte of the secret or the environment
    answers: list[str] = []
    async with api(lab_ctx) as client:
        for case, job_id in jobs.items():
            rest = await client.get("/v1/audit/events", params={"jobId": job_id, "eventType": "log.refused"})
            assert rest.status_code == 200
            assert expected[case] in {e["payload"]["reason"] for e in rest.json()["events"]}, rest.text[:500]
            graph = await client.post("/graphql", json={"query": ATTEMPT_EVENTS, "variables": {"job": job_id}})
            attempt = graph.json()["data"]["attempt"]
            assert any(
                e["eventType"] == "log.refused" and e["payload"]["reason"] == expected[case]
                for e in attempt["auditEvents"]["nodes"]
            )
            page = await client.get("/dashboard/audit", params={"job": f"{job_id}/0"})
            assert page.status_code == 200 and "log.refused" in page.text
            details = await client.get(f"/dashboard/jobs/{job_id}/attempts/0")
            assert details.status_code == 200 and "Not read" in details.text and expected[case] in details.text
            answers.append(details.text)
            view = await client.get(
                f"/dashboard/jobs/{job_id}/attempts/0/log", params={"path": attempt["stdoutPath"], "line": 1}
            )
            assert view.status_code in (200, 404) and "CUDA error" not in view.text
            answers += [rest.text, graph.text, page.text, view.text]
            answers.append((await client.get(f"/dashboard/jobs/{job_id}")).text)
    for text in answers + [caplog.text] + [e.message + str(e.payload) for e in await events(lab_ctx, "log.refused")]:
        assert SECRET not in text
        assert start_environment not in text
    assert all(e.event_type != "anomaly.detected" for e in await _events_of(lab_ctx, list(jobs.values())))


async def _events_of(ctx: AppContext, job_ids: list[int]) -> list[AuditEvent]:
    return await rows(ctx, AuditEvent, AuditEvent.slurm_job_id.in_(job_ids))
