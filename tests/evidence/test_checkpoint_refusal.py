"""The advisor's checkpoint check looks at a logged path with the job's rights and records a refusal as log.refused."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from pathlib import Path

from app.evidence import checkpoint_release as checkpoint_checks
from app.evidence.models import Checkpoint
from app.infra.context import AppContext
from app.jobs import service as jobs
from app.jobs.models import Attempt, Job
from tests.factories import add_attempt, events, registration


async def _saved(ctx: AppContext, slurm_job_id: int, path: Path, **overrides: object) -> tuple[Job, Attempt]:
    async with ctx.sessions() as session, session.begin():
        job = await jobs.register_job(
            session,
            registration=registration(slurm_job_id, cluster=ctx.settings.cluster, partition="gpu", **overrides),
        )
    attempt = await add_attempt(ctx, job, 0, start_time=dt.datetime.now(dt.UTC))
    async with ctx.sessions() as session, session.begin():
        session.add(
            Checkpoint(
                attempt_id=attempt.id,
                event_key=f"ck-refusal-{slurm_job_id}",
                kind="saved",
                framework="megatron",
                iteration=500,
                path=str(path),
                line=f"saved checkpoint to {path}",
            )
        )
    return job, attempt


async def test_a_symlinked_checkpoint_path_is_not_looked_at_and_recorded(ctx: AppContext, tmp_path: Path) -> None:
    settings = dataclasses.replace(
        ctx.settings, checkpoint_check_partitions=("gpu",), checkpoint_check_roots=(str(tmp_path),)
    )
    real = tmp_path / "elsewhere"
    (real / "iter_0000500").mkdir(parents=True)
    (tmp_path / "run").symlink_to(real)  # the job's log names a path through its own symlink
    job, attempt = await _saved(ctx, 71, tmp_path / "run" / "gpt3")
    unknown_job, unknown_attempt = await _saved(ctx, 72, real, user_id=None, group_id=None)
    async with ctx.sessions() as session, session.begin():
        result = await checkpoint_checks.check_newest_save(
            session, settings=settings, job=job, attempt=attempt, previous=None
        )
        unknown = await checkpoint_checks.check_newest_save(
            session, settings=settings, job=unknown_job, attempt=unknown_attempt, previous=None
        )
    assert result is not None and result.status.value == "UNCHECKED" and "(symlink)" in result.message
    assert unknown is not None and unknown.status.value == "UNCHECKED" and "(uid-unknown)" in unknown.message
    refused = {(e.slurm_job_id, e.attempt_index, e.payload["reason"]) for e in await events(ctx, "log.refused")}
    assert refused == {(71, 0, "symlink"), (72, 0, "uid-unknown")}
    assert os.path.isdir(real)  # nothing was written or removed
