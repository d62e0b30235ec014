"""The advisor's decision for one failed attempt, and how later signals about it merge into one Advice."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from app.domain.control import states
from app.domain.decision.retry import (
    AttemptRecord,
    FailureKind,
    early_stop_applies,
    effective_retry_limit,
    failures_without_progress,
    retry_limit_reached,
)
from app.domain.decision.rootcause import APPLICATION, fingerprint_id, same_place
from app.domain.fleetwide.trust import with_suspects


class Operation(StrEnum):
    """What the Advice asks for; NONE means no Advice is written."""

    RESTART = "RESTART"
    TERMINATE = "TERMINATE"
    NONE = "NONE"


class Rule(StrEnum):
    """Stable ids of the rules that produce a decision (shown in history, tested, documented)."""

    RESTART_ALLOWED = "restart_allowed"
    RETRY_LIMIT = "retry_limit"
    EARLY_STOP_NO_CHECKPOINT = "early_stop_no_checkpoint"
    SLOWDOWN_NOT_ALLOWED = "slowdown_not_allowed"
    REQUEUE_NOT_POSSIBLE = "requeue_not_possible"
    JOB_COMPLETED = "job_completed"
    JOB_CANCELLED = "job_cancelled"
    NOT_A_FAILURE = "not_a_failure"
    RESUME_MODE_UNSUPPORTED = "resume_mode_unsupported"
    APPLICATION_FAILURE_REPEATED = "application_failure_repeated"
    RELEASE_SINGLETON_TWIN = "release_singleton_twin"


SUPPORTED_RESUME_MODES = frozenset({"requeue", "singleton_dependency"})
MODES = frozenset({"act", "observe"})


@dataclass(frozen=True)
class Failure:
    """One signal that an attempt failed (or is failing), with the evidence it carries."""

    attempt_index: int
    kind: FailureKind
    state: str | None = None  # Slurm state, for SCHEDULER_FAILURE
    exit_code: int | None = None
    category: str | None = None  # crash category, e.g. "cuda_oom", "xid"
    # Only nodes that the evidence itself names (Xid on a node, the failed node, an NCCL peer),
    # never the whole allocation.
    implicated_nodes: tuple[str, ...] = ()
    evidence_refs: tuple[str, ...] = ()
    attempt_running: bool = False  # the attempt was still RUNNING when the signal was seen
    checkpoints_saved: int = 0  # saves recorded during this attempt
    latest_checkpoint_iteration: int | None = None
    # Root cause (app.domain.decision.rootcause): retry outlook, "the same failure" key, the iteration it happened at.
    outlook: str | None = None
    signature: str | None = None
    iteration: int | None = None
    # What the ranks' stacks showed before Recovery ended the attempt (app.domain.detection.stacks), if captured.
    stack_note: str | None = None


@dataclass(frozen=True)
class JobPolicy:
    """The parts of the job's effective APS policy (and Slurm flags) the decision reads."""

    max_requeue_times: int | None = None
    straggler_detection_enabled: bool = False
    auto_resume_mode: str = "requeue"
    requeue_eligible: bool | None = None  # None: not observed; Slurm's JobRequeue default applies


@dataclass(frozen=True)
class SitePolicy:
    """Operator settings the decision reads (site_max_requeue, early_stop_failures, ...)."""

    max_requeue: int = 3
    early_stop_failures: int = 3
    straggler_enabled: bool = False
    advice_ttl: float = 3600.0  # seconds; <= 0 means Advice never expires
    stop_repeated_application_failures: bool = True


@dataclass(frozen=True)
class Decision:
    """The advisor's verdict for one attempt; RESTART/TERMINATE become an Advice, NONE does not."""

    operation: Operation
    reason: str
    rule: str
    exclusions: tuple[str, ...] = ()
    expires_at: dt.datetime | None = None


def decide(
    *,
    failure: Failure,
    policy: JobPolicy,
    site: SitePolicy,
    history: Sequence[AttemptRecord] = (),
    partition_nodes: Iterable[str] | None = None,
    now: dt.datetime,
    suspect_nodes: Iterable[str] = (),
) -> Decision:
    """Decide RESTART, TERMINATE or NONE for the failed attempt; ``history`` is the attempts before it.

    ``suspect_nodes`` are the cluster's suspect nodes (app.domain.fleetwide.trust): excluded as well as the job's own,
    as far as the partition guard lets them.
    """
    earlier = tuple(a for a in history if a.attempt_index < failure.attempt_index)
    exclusions, exclusion_note = accumulate_exclusions(
        failure=failure, history=earlier, partition_nodes=partition_nodes
    )
    exclusions, suspect_note = with_suspects(exclusions, suspect_nodes, partition_nodes)
    if suspect_note:
        exclusion_note = f"{exclusion_note} {suspect_note}" if exclusion_note else suspect_note
    expires_at = now + dt.timedelta(seconds=site.advice_ttl) if site.advice_ttl > 0 else None
    what = describe_failure(failure)

    def verdict(operation: Operation, rule: Rule, reason: str) -> Decision:
        if exclusion_note and operation is Operation.RESTART:
            reason = f"{reason} {exclusion_note}"
        return Decision(
            operation=operation, reason=reason, rule=rule.value, exclusions=exclusions, expires_at=expires_at
        )

    if failure.kind is FailureKind.SCHEDULER_FAILURE:
        state = (failure.state or "").upper()
        if state == "COMPLETED":
            return verdict(
                Operation.NONE,
                Rule.JOB_COMPLETED,
                f"{what}: the attempt completed successfully, so there is nothing to recover.",
            )
        if state == "CANCELLED":
            return verdict(
                Operation.NONE,
                Rule.JOB_CANCELLED,
                f"{what}: a cancellation is someone's decision, not a failure, so it is not retried.",
            )
        if state not in states.RETRYABLE_FAILED:
            return verdict(
                Operation.NONE,
                Rule.NOT_A_FAILURE,
                f"{what}: state {state or 'unknown'} is not a failure this service recovers.",
            )

    if policy.auto_resume_mode not in SUPPORTED_RESUME_MODES:
        return verdict(
            Operation.NONE,
            Rule.RESUME_MODE_UNSUPPORTED,
            f"{what}: auto_resume_mode {policy.auto_resume_mode!r} is recognised but only requeue "
            f"recovery is carried out.",
        )

    slowdown = failure.kind is FailureKind.SLOWDOWN
    if slowdown and not (site.straggler_enabled and policy.straggler_detection_enabled):
        off = [
            name
            for name, on in (
                ("the operator's straggler switch", site.straggler_enabled),
                ("the job's straggler_detection_enabled", policy.straggler_detection_enabled),
            )
            if not on
        ]
        return verdict(
            Operation.NONE,
            Rule.SLOWDOWN_NOT_ALLOWED,
            f"{what}: slowdown recovery needs both switches and {' and '.join(off)} is off; the attempt keeps running.",
        )

    # A slow attempt still makes progress: when it may not be restarted it is left running.
    # A crashed or hung attempt that is still RUNNING is cancelled instead of left hanging.
    stop_operation = Operation.NONE if slowdown else Operation.TERMINATE
    # singleton_dependency retries in another job (the held twin): the first job's --no-requeue does not matter
    if policy.requeue_eligible is False and policy.auto_resume_mode != "singleton_dependency":
        cancel_it = failure.attempt_running and not slowdown
        if cancel_it:
            return verdict(
                Operation.TERMINATE,
                Rule.REQUEUE_NOT_POSSIBLE,
                f"{what}: the job is not requeue-eligible (--no-requeue), so the crashed or hung "
                f"attempt is cancelled rather than left running.",
            )
        tail = "the slow attempt keeps running" if slowdown else "it has ended and nothing more can be done"
        return verdict(
            Operation.NONE,
            Rule.REQUEUE_NOT_POSSIBLE,
            f"{what}: the job is not requeue-eligible (--no-requeue), so it cannot be restarted; {tail}.",
        )

    limit = effective_retry_limit(site_ceiling=site.max_requeue, job_max_requeue=policy.max_requeue_times)
    if retry_limit_reached(limit, failure.attempt_index):
        return verdict(
            stop_operation,
            Rule.RETRY_LIMIT,
            f"{what}: {limit.describe_reached()}, so it is not restarted{_stop_tail(stop_operation)}.",
        )

    repeated = repeated_application_failure(failure, earlier) if site.stop_repeated_application_failures else None
    if repeated is not None:
        where = f" at iteration {failure.iteration}" if failure.iteration is not None else ", no iteration read"
        return verdict(
            stop_operation,
            Rule.APPLICATION_FAILURE_REPEATED,
            f"{what}: the same application failure as attempt {repeated.attempt_index} "
            f"({_quote(failure.signature)}{where}); outlook application, so a retry would fail the same way "
            f"and it is not restarted (rule {Rule.APPLICATION_FAILURE_REPEATED.value}; "
            "RECOVERY_STOP_REPEATED_APPLICATION_FAILURES=false turns it off).",
        )

    streak = failures_without_progress(
        history=earlier,
        checkpoints_saved=failure.checkpoints_saved,
        latest_checkpoint_iteration=failure.latest_checkpoint_iteration,
    )
    if early_stop_applies(failures_in_a_row=streak, early_stop_failures=site.early_stop_failures):
        return verdict(
            stop_operation,
            Rule.EARLY_STOP_NO_CHECKPOINT,
            f"{what}: {streak} failure{'s' if streak != 1 else ''} in a row without a new checkpoint "
            f"(site early stop after {site.early_stop_failures}), "
            f"so the run is not making progress and is not restarted{_stop_tail(stop_operation)}.",
        )

    exclusion_text = f" excluding {', '.join(exclusions)}" if exclusions else ""
    if policy.auto_resume_mode == "singleton_dependency":
        return verdict(
            Operation.RESTART,
            Rule.RELEASE_SINGLETON_TWIN,
            f"{what}: release its held twin (same name, --dependency=singleton) as retry "
            f"{failure.attempt_index + 1} of {limit.describe()}{exclusion_text}.",
        )
    return verdict(
        Operation.RESTART,
        Rule.RESTART_ALLOWED,
        f"{what}: restart as attempt {failure.attempt_index + 1}{exclusion_text}; retry "
        f"{failure.attempt_index + 1} of {limit.describe()}.",
    )


def repeated_application_failure(failure: Failure, earlier: Sequence[AttemptRecord]) -> AttemptRecord | None:
    """The previous attempt, when it failed with the same application failure at the same place."""
    if failure.outlook != APPLICATION or not failure.signature or not earlier:
        return None
    previous = max(earlier, key=lambda a: a.attempt_index)
    if not previous.failed or previous.failure_outlook != APPLICATION:
        return None
    if same_place(failure.signature, failure.iteration, previous.failure_signature, previous.failure_iteration):
        return previous
    return None


def _quote(signature: str | None) -> str:
    text = (signature or "").strip()
    return text if len(text) <= 160 else text[:157] + "..."


def _stop_tail(operation: Operation) -> str:
    return "; the slow attempt keeps running" if operation is Operation.NONE else ""


def describe_failure(failure: Failure) -> str:
    """A short human description of what happened to the attempt, with what its stacks showed when captured."""
    said = _describe_failure(failure)
    return f"{said} (stacks: {failure.stack_note})" if failure.stack_note else said


def _describe_failure(failure: Failure) -> str:
    prefix = f"attempt {failure.attempt_index}"
    if failure.kind is FailureKind.SCHEDULER_FAILURE:
        state = (failure.state or "UNKNOWN").upper()
        exit_text = f", exit code {failure.exit_code}" if failure.exit_code is not None else ""
        cause = f", root cause {failure.category}" + (f" ({failure.outlook})" if failure.outlook else "")
        return f"{prefix} ended {state}{exit_text}{cause if failure.category else ''}"
    if failure.kind is FailureKind.CRASH:
        outlook = f", outlook {failure.outlook}" if failure.outlook else ""
        fingerprint = f", fingerprint {fingerprint_id(failure.signature)}" if failure.signature else ""
        return f"{prefix} crashed ({failure.category or 'crash signature'}{outlook}){fingerprint}"
    if failure.kind is FailureKind.NO_PROGRESS:
        return f"{prefix} stopped making progress (no output within the hang threshold)"
    return f"{prefix} slowed down for good (throughput below its baseline)"


def _clean(nodes: Iterable[str]) -> set[str]:
    return {n.strip() for n in nodes if isinstance(n, str) and n.strip()}


def accumulate_exclusions(
    *, failure: Failure, history: Sequence[AttemptRecord] = (), partition_nodes: Iterable[str] | None = None
) -> tuple[tuple[str, ...], str | None]:
    """Union of nodes named by evidence over the job's attempts and earlier Advice; never the whole partition.

    Returns the sorted exclusions and, when the partition guard had to cut them down, a
    sentence saying so.
    """
    newest = _clean(failure.implicated_nodes)
    union = set(newest)
    for attempt in history:
        union |= _clean(attempt.implicated_nodes) | _clean(attempt.advice_exclusions)
    return guard_partition(union, newest, partition_nodes)


def guard_partition(
    union: set[str], newest: set[str], partition_nodes: Iterable[str] | None
) -> tuple[tuple[str, ...], str | None]:
    """Keep exclusions from covering every node of the partition (the job could never run again)."""
    partition = _clean(partition_nodes) if partition_nodes is not None else set()
    if not partition or not partition <= union:
        return tuple(sorted(union)), None
    if newest and not partition <= newest:
        return tuple(sorted(newest)), (
            f"Excluding every suspect node ({', '.join(sorted(union))}) would leave no node in the partition, "
            f"so only the newest evidence's nodes ({', '.join(sorted(newest))}) are excluded."
        )
    return (), (
        f"Excluding the suspect nodes ({', '.join(sorted(union))}) would leave no node in the "
        f"partition, so no node is excluded."
    )


def advice_changed(old: Decision | None, new: Decision) -> bool:
    """True when the desired state (operation or exclusions) differs, i.e. the Advice needs a new generation."""
    if old is None:
        return new.operation is not Operation.NONE
    return old.operation != new.operation or tuple(sorted(old.exclusions)) != tuple(sorted(new.exclusions))


def merge_signals(
    existing: Decision | None, new: Decision, *, partition_nodes: Iterable[str] | None = None
) -> Decision:
    """Fold the decision for a later signal about the same attempt into the existing one (one failure, one Advice).

    The result is ``existing`` itself (same generation) unless the desired state changes:
    newer information decides the operation, exclusions only grow, and a NONE verdict
    (e.g. the job's FAILED state after a crash line with --no-requeue) never withdraws an
    Advice - except a clean completion, which turns a RESTART into TERMINATE/job_completed
    so a finished run is not started again.
    """
    if existing is None or existing.operation is Operation.NONE:
        return new
    if new.operation is Operation.NONE:
        if new.rule == Rule.JOB_COMPLETED and existing.operation is Operation.RESTART:
            return replace(
                new,
                operation=Operation.TERMINATE,
                exclusions=existing.exclusions,
                expires_at=new.expires_at or existing.expires_at,
            )
        return existing
    exclusions, note = guard_partition(
        set(existing.exclusions) | set(new.exclusions), set(new.exclusions), partition_nodes
    )
    merged = Decision(
        operation=new.operation,
        reason=new.reason if note is None else f"{new.reason} {note}",
        rule=new.rule,
        exclusions=exclusions,
        expires_at=new.expires_at or existing.expires_at,
    )
    return existing if not advice_changed(existing, merged) else merged


def advice_record(
    decision: Decision, *, mode: str, mode_reason: str | None, evidence_refs: Sequence[str] = ()
) -> dict[str, Any]:
    """Column values for an Advice row (app.advice.models.Advice) built from a decision and the resolved mode."""
    if decision.operation is Operation.NONE:
        raise ValueError("a NONE decision produces no Advice")
    if mode not in MODES:
        raise ValueError(f"mode must be act or observe, got {mode!r}")
    return {
        "operation": decision.operation.value,
        "exclusions": list(decision.exclusions),
        "reason": decision.reason,
        "rule": decision.rule,
        "expires_at": decision.expires_at,
        "mode": mode,
        "mode_reason": mode_reason,
        "evidence": {"refs": list(evidence_refs)},
    }
