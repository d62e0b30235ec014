"""Decide whether a job is admitted and which mode (observe/act) it really runs under (SPEC §2, §6)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from app.domain.admission.policy import INVALID, NO_POLICY, PolicyResult

OBSERVE = "observe"
ACT = "act"

CEILING_SETTING = "RECOVERY_ACKNOWLEDGE_SCHEDULER_ACTIONS"
PARTITIONS_SETTING = "RECOVERY_MANAGED_PARTITIONS"

# Admission outcomes.
ENROLLED = "ENROLLED"
NOT_ENROLLED = "NOT_ENROLLED"  # the comment tried to enrol but the policy is invalid
ENVIRONMENT_MISMATCH = "ENVIRONMENT_MISMATCH"
UNMANAGED_PARTITION = "UNMANAGED_PARTITION"
NO_POLICY_ADMISSION = "NO_POLICY"


@dataclass(frozen=True)
class ModeDecision:
    """The mode a job runs under and the sentence that explains it."""

    mode: str
    reason: str
    requested: str | None = None

    def to_dict(self) -> dict[str, str | None]:
        return {"mode": self.mode, "requested": self.requested, "reason": self.reason}


@dataclass(frozen=True)
class Admission:
    """Whether a job is enrolled, and why (or why not)."""

    status: str
    reason: str

    @property
    def enrolled(self) -> bool:
        return self.status == ENROLLED

    def to_dict(self) -> dict[str, str]:
        return {"status": self.status, "reason": self.reason}


def resolve_mode(*, requested: str | None, acknowledged: bool, partition_managed: bool) -> ModeDecision:
    """`act` only when the job asks for it, the operator's ceiling is on and the partition is managed."""
    if requested is None:
        return ModeDecision(OBSERVE, "no mode was requested; observe is the default", requested)
    if requested == OBSERVE:
        return ModeDecision(OBSERVE, "the job requested observe", requested)
    if requested != ACT:
        return ModeDecision(
            OBSERVE, f"the requested mode {requested!r} is not observe or act, so observe applies", requested
        )
    blockers = []
    if not acknowledged:
        blockers.append(f"the operator's acknowledgment ceiling ({CEILING_SETTING}) is off")
    if not partition_managed:
        blockers.append(f"the job's partition is not in the managed allowlist ({PARTITIONS_SETTING})")
    if blockers:
        return ModeDecision(
            OBSERVE, "mode act requested but " + " and ".join(blockers) + "; resolved to observe", requested
        )
    return ModeDecision(
        ACT, "mode act requested, the operator acknowledges scheduler actions and the partition is managed", requested
    )


class ModeSettings(Protocol):
    """The operator's settings the mode depends on (app.infra.config.Settings has them)."""

    @property
    def acknowledge_scheduler_actions(self) -> bool: ...

    def partition_managed(self, partition: str | None) -> bool: ...


class ModeSubject(Protocol):
    """What the mode depends on about a job: the mode its policy requested and its partition."""

    @property
    def requested_mode(self) -> str | None: ...

    @property
    def partition(self) -> str | None: ...


@dataclass(frozen=True)
class Requested:
    """A job not stored yet (registration, check-policy): its requested mode and partition."""

    requested_mode: str | None
    partition: str | None


def effective_mode(job: ModeSubject, settings: ModeSettings) -> ModeDecision:
    """The mode the job runs under NOW: its request under the operator's current ceiling and allowlist.

    Every surface (observer, advisor, controller, API, dashboard, check-policy) asks this one function,
    so a flipped ceiling shows the same mode everywhere at once; a stored mode is only what was decided then.
    """
    return resolve_mode(
        requested=job.requested_mode,
        acknowledged=settings.acknowledge_scheduler_actions,
        partition_managed=settings.partition_managed(job.partition),
    )


def admission(result: PolicyResult, *, environment: str, partition_managed: bool) -> Admission:
    """Enrolment decision from a parsed comment, the operator's environment and the partition allowlist."""
    if result.status == NO_POLICY:
        return Admission(NO_POLICY_ADMISSION, result.reason)
    if result.status == INVALID or result.policy is None:
        return Admission(NOT_ENROLLED, result.reason)
    job_environment = result.policy.environment
    if job_environment != environment:
        hint = ""
        if isinstance(job_environment, str) and job_environment.strip().casefold() == environment.casefold():
            hint = " (they differ only in case or surrounding spaces; the match is exact and case-sensitive)"
        return Admission(
            ENVIRONMENT_MISMATCH,
            f"The policy's environment {job_environment!r} does not equal this installation's "
            f"environment {environment!r}{hint}; the job is not admitted.",
        )
    if not partition_managed:
        return Admission(
            UNMANAGED_PARTITION,
            f"The job's partition is not one of the partitions this installation manages "
            f"({PARTITIONS_SETTING}); the job is not enrolled.",
        )
    return Admission(ENROLLED, f"The policy is valid and its environment {environment!r} matches; the job is enrolled.")
