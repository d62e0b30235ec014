"""The collector reads a job's files only as the job's user could, and records each refusal once as log.refused."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from app.audit.models import AuditEvent
from app.infra.context import AppContext
from app.jobfiles.reader import FilePosition, ReadResult
from app.jobs import service as jobs
from app.jobs.models import Job
from tests.factories import add_attempt, anomalies, enrolled_job, events, registration, rows, sources
from tests.worker.helpers import CRASH, Clock, collector_for

SECRET = "RECOVERY_SESSION_SECRET=do-not-show-" + "x" * 16


async def job_with_stdout(ctx: AppContext, slurm_job_id: int, path: Path, **overrides: object) -> Job:
    """An enrolled job (uid: this process's unless overridden) whose running attempt writes to `path`."""
    async with ctx.sessions() as session, session.begin():
        job = await jobs.register_job(
            session, registration=registration(slurm_job_id, cluster=ctx.settings.cluster, **overrides)
        )
    await add_attempt(ctx, job, 0, stdout_path=str(path), stderr_path=str(path), start_time=dt.datetime.now(dt.UTC))
    return job


async def all_events(ctx: AppContext) -> list[AuditEvent]:
    return await rows(ctx, AuditEvent)


async def refused(ctx: AppContext) -> list[tuple[int | None, str, str]]:
    return [(e.attempt_index, e.payload["reason"], e.payload["file"]) for e in await events(ctx, "log.refused")]


async def test_symlinked_stdout_is_never_read_and_refused_once(ctx: AppContext, tmp_path: Path) -> None:
    secret = tmp_path / "secret.env"
    secret.write_text(SECRET + "\n" + CRASH)  # read, it would become a crash anomaly with the secret beside it
    out = tmp_path / "out-31.log"
    out.symlink_to(secret)
    await job_with_stdout(ctx, 31, out)
    clock = Clock(dt.datetime.now(dt.UTC))
    collector = collector_for(ctx, clock)
    for _ in range(3):
        await collector.tick()
        clock.advance(5)
    assert await anomalies(ctx) == []
    assert await refused(ctx) == [(0, "symlink", str(out))]
    [source] = await sources(ctx)
    assert source.refused_reason == "symlink" and source.offset == 0 and source.inode is None
    for event in await all_events(ctx):
        assert "do-not-show" not in event.message and "do-not-show" not in str(event.payload)
    # the job's own regular file at that path is read from then on
    out.unlink()
    out.write_text("hello\n" + CRASH)
    await collector.tick()
    [crash] = await anomalies(ctx)
    assert crash.log_path == str(out)
    [source] = await sources(ctx)
    assert source.refused_reason is None and source.inode == out.stat().st_ino
    assert len(await refused(ctx)) == 1


async def test_fifo_stdout_does_not_block_the_collector(ctx: AppContext, tmp_path: Path) -> None:
    out = tmp_path / "out-32.log"
    os.mkfifo(out)
    await job_with_stdout(ctx, 32, out)
    clock = Clock(dt.datetime.now(dt.UTC))
    collector = collector_for(ctx, clock)
    opened: list[str] = []
    read = collector.tailer.read

    def counting(position: FilePosition, **kwargs: Any) -> ReadResult:
        opened.append(position.path)
        return read(position, **kwargs)

    collector.tailer.read = counting  # type: ignore[method-assign]
    await asyncio.wait_for(collector.tick(), timeout=10)
    assert opened == [str(out)]
    for _ in range(3):  # polls of an unchanged refused path do not open it again
        clock.advance(5)
        await asyncio.wait_for(collector.tick(), timeout=10)
    assert opened == [str(out)]
    assert await refused(ctx) == [(0, "not-regular-file", str(out))]
    [event] = await events(ctx, "log.refused")
    assert "FIFO" in event.payload["detail"] and event.level == "WARNING"


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
async def test_another_users_file_and_an_unknown_uid_are_refused(ctx: AppContext, tmp_path: Path) -> None:
    theirs = tmp_path / "out-33.log"
    theirs.write_text(CRASH)
    os.chown(theirs, 65534, 65534)
    await job_with_stdout(ctx, 33, theirs)
    old = tmp_path / "out-34.log"
    old.write_text(CRASH)
    await job_with_stdout(ctx, 34, old, user_id=None, group_id=None)  # a row from before uids were stored
    collector = collector_for(ctx)
    await collector.tick()
    await collector.tick()
    assert await anomalies(ctx) == []
    assert sorted(await refused(ctx)) == [(0, "uid-unknown", str(old)), (0, "wrong-owner", str(theirs))]
    await collector.on_stop()
    [wrong] = [e for e in await events(ctx, "log.refused") if e.payload["reason"] == "wrong-owner"]
    assert f"owner uid 65534 is not the job's uid {os.getuid()}" in wrong.payload["detail"]
    assert wrong.slurm_job_id == 33 and wrong.attempt_index == 0
    # RECOVERY_LOG_ACCESS=readable: a job of uid 4242 may not read another user's 0600 file, but a 0644 one
    shared = Path(tempfile.mkdtemp(prefix="refusals-", dir="/tmp"))
    try:
        os.chmod(shared, 0o755)
        private, public = shared / "out-36.log", shared / "out-37.log"
        for path, mode in ((private, 0o600), (public, 0o644)):
            path.write_text(CRASH)
            os.chown(path, 65534, 65534)
            os.chmod(path, mode)
        await job_with_stdout(ctx, 36, private, user_id=4242, group_id=4242)
        await job_with_stdout(ctx, 37, public, user_id=4242, group_id=4242)
        readable = collector_for(ctx, log_access="readable")
        await readable.tick()
        read = {a.log_path for a in await anomalies(ctx)}
        assert str(public) in read and str(private) not in read
        assert (0, "not-readable", str(private)) in await refused(ctx)
        assert str(public) not in {path for _, _, path in await refused(ctx)}
    finally:
        shutil.rmtree(shared, ignore_errors=True)


async def test_log_directory_entries_are_opened_with_the_same_rule(ctx: AppContext, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    secret = tmp_path / "secret.env"
    secret.write_text(CRASH)
    (logs / "train-35.log").symlink_to(secret)
    job = await enrolled_job(ctx, 35)
    await add_attempt(ctx, job, 0, start_time=dt.datetime.now(dt.UTC))
    collector = collector_for(ctx, log_dirs=(str(logs),))
    await collector.tick()
    await collector.tick()
    assert await anomalies(ctx) == []
    assert await refused(ctx) == [(0, "symlink", str(logs / "train-35.log"))]
