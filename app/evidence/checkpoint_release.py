"""The checkpoint check before release (item of SPEC §6 retry rules): which save to look at, and its audit event."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.audit import service as audit
from app.domain.decision.checkpoint_rules import CheckResult, partition_selected
from app.evidence import queries
from app.infra.config import Settings
from app.jobfiles.checkpoint_probe import REFUSED_PREFIX, check_path_bounded
from app.jobfiles.safe_open import AccessRule

if TYPE_CHECKING:
    from app.jobs.models import Attempt, Job


def enabled_for(settings: Settings, partition: str | None) -> bool:
    """True when the operator asked for checkpoint checks in this partition."""
    return partition_selected(partition, settings.checkpoint_check_partitions)


async def check_newest_save(
    session: AsyncSession,
    *,
    settings: Settings,
    job: Job,
    attempt: Attempt,
    previous: Mapping[str, Any] | None,
    stored: Mapping[str, Any] | None = None,
) -> CheckResult | None:
    """Look at the attempt's newest recorded save (None: off here, or no save recorded); audit a new verdict."""
    if not enabled_for(settings, job.partition):
        return None
    row = await queries.newest_saved_checkpoint(session, attempt_id=attempt.id)
    if row is None:
        return None  # nothing recorded: the early stop already counts this attempt as "no new checkpoint"
    result = await check_path_bounded(
        row.path,
        timeout=settings.checkpoint_check_timeout,
        framework=row.framework,
        roots=settings.checkpoint_check_roots,
        access=AccessRule.for_job(
            uid=job.user_id,
            gid=job.group_id,
            user_name=job.user,
            mode=settings.log_access,
            unknown_uid=settings.log_access_unknown_uid,
        ),
        recorded_iteration=row.iteration,
        previous=CheckResult.from_dict(previous),
    )
    before = CheckResult.from_dict(stored)
    if before is None or (before.status, before.message) != (result.status, result.message):
        await audit.record(
            session,
            component="advisor",
            event_type="checkpoint.checked",
            level="INFO" if result.loadable else "WARNING",
            message=f"attempt {attempt.attempt_index}: checkpoint check {result.status.value}: {result.message}",
            payload={"checkpointId": row.id, "line": row.line, **result.as_dict()},
            cluster=job.cluster,
            slurm_job_id=attempt.slurm_job_id,
            attempt_index=attempt.attempt_index,
        )
        if result.message.startswith(REFUSED_PREFIX):  # once per new verdict, like checkpoint.checked
            reason = result.message[len(REFUSED_PREFIX) :].split(")", 1)[0].strip(" (")
            await audit.record(
                session,
                component="advisor",
                event_type="log.refused",
                level="WARNING",
                message=f"attempt {attempt.attempt_index}: checkpoint path not looked at ({reason}): {result.message}",
                payload={"file": row.path, "reason": reason, "detail": result.message, "checkpointId": row.id},
                cluster=job.cluster,
                slurm_job_id=attempt.slurm_job_id,
                attempt_index=attempt.attempt_index,
                workflow_id=job.workflow_id,
            )
    return result
