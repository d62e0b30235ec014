"""Read models of Advice, its reconciliation and its scheduler actions: their fields as the APIs show them."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from app.domain.control.identity import attempt_uuid, format_attempt_ref
from app.infra.read_model_fields import Field, Given, GlobalId, ReadModel, Resolved

SCHEDULER_ACTION = ReadModel(
    "Milestone",
    (
        Field("generation", int),
        Field("step", str, description="requeue_hold, update_exclusions, release or cancel."),
        Field("status", str, description="STARTED, SUCCEEDED, SKIPPED, FAILED or SHADOW."),
        Field("idempotency_key", str),
        Field("actor", str),
        Field("command", str, nullable=True),
        Field("detail", str, nullable=True),
        Field("started_at", dt.datetime),
        Field("finished_at", dt.datetime, nullable=True),
        Field("duration_ms", float, nullable=True),
        Field(
            "gate",
            str,
            nullable=True,
            description="The one gate's answer when it was taken: `allowed (ALLOWED): …` or `not sent (REASON): …` "
            "(ceiling, job mode, mode at decision, the component's own switch, fleet rules); null on older rows.",
        ),
    ),
)

# The Advice row seen as the controller's report (REST: reconciliationStatus, with the milestones the handler gives).
RECONCILIATION = ReadModel(
    "Reconciliation",
    (
        Field("disposition", str, description="PENDING, CONVERGED or ABANDONED."),
        Field(
            "reason",
            str,
            nullable=True,
            source="disposition_reason",
            description="DESIRED_STATE_OBSERVED, ALREADY_SATISFIED, ADVICE_EXPIRED, JOB_NOT_FOUND, "
            "NOT_AUTHORIZED, DECIDED_IN_OBSERVE, VETOED, BUDGET_EXCEEDED, STORM_PAUSED, …",
        ),
        Field("message", str, nullable=True, source="disposition_message"),
        Field(
            "observed_generation",
            int,
            nullable=True,
            description="The Advice generation the controller last reported on.",
        ),
        Field("next_reconcile_at", dt.datetime, nullable=True, rest=False),
        Field("reconcile_failures", int, rest=False),
    ),
)

ADVICE = ReadModel(
    "Advice",
    (
        Field("id", GlobalId, description="Opaque global id.", rest=False),
        Field("row_id", int, source="id", graphql=False, rest_name="id"),
        Field("job_id", int, source="slurm_job_id", description="The Slurm job id."),
        Field("attempt_index", int),
        Field(
            "heimdall_job_id",
            str,
            source=lambda row: attempt_uuid(row.cluster, row.slurm_job_id, row.attempt_index),
            description="The UUID of the attempt this Advice is about.",
        ),
        Field(
            "attempt_ref",
            str,
            source=lambda row: format_attempt_ref(row.slurm_job_id, row.attempt_index),
            rest=False,
        ),
        Field("cluster", str),
        Field("operation", str, description="RESTART or TERMINATE."),
        Field("exclusions", (list, str), description="Nodes the next attempt must avoid."),
        Field("reason", str),
        Field(
            "rule",
            str,
            nullable=True,
            description="The policy rule that decided (e.g. which retry limit stopped it).",
        ),
        Field("evidence", dict, rest=False),
        Field(
            "checkpoint_check",
            dict,
            nullable=True,
            source=lambda row: row.checkpoint_check or None,
            rest=False,
            description="The checkpoint check made before release (status OK, MISSING, INCOMPLETE, NOT_NEWER or "
            "UNCHECKED, message, path, framework, layout, iteration, loadable); null when checks are off or no save "
            "was recorded (docs/checkpoint-checks.md).",
        ),
        Field(
            "successor_job_id",
            int,
            nullable=True,
            rest=False,
            description="auto_resume_mode singleton_dependency: the Slurm job id of the held twin this Advice "
            "releases.",
        ),
        Field("generation", int, description="Grows whenever the decision changes."),
        Resolved("mode"),
        Field("mode", str, graphql=False, source=Given),
        Resolved("mode_reason"),
        Field("mode_reason", str, nullable=True, graphql=False, source=Given),
        Field(
            "mode_at_decision",
            str,
            source="mode",
            description="The mode it was decided under (a record of that time, not the mode now).",
        ),
        Field(
            "mode_reason_at_decision",
            str,
            nullable=True,
            source="mode_reason",
            rest=False,
            description="Why modeAtDecision applied when it was decided.",
        ),
        Field("decided_again_from", int, nullable=True, source="supersedes_id", graphql=False),
        Field("decided_again_as", int, nullable=True, source="superseded_by_id", graphql=False),
        Resolved("decided_again_as"),
        Resolved("decided_again_from"),
        Field("expires_at", dt.datetime, nullable=True),
        Field("active", bool, description="True while it may still need reconciliation."),
        Field("review", str, nullable=True, description="Operator review: APPROVED, VETOED or null."),
        Field("reviewed_by", str, nullable=True),
        Resolved("reconciliation"),
        Field("reconciliation_status", dict, graphql=False, source=Given),
        Field("created_at", dt.datetime),
        Field("updated_at", dt.datetime),
    ),
)

# Of an app.advice.today.Need: one line of the home page's "Needs you" list.
NEED = ReadModel(
    "Need",
    (
        Field(
            "kind",
            str,
            choices=("storm", "held", "node", "refused", "stopped"),
            description="storm (automatic action paused), held (a restart held by a budget or storm), node (turned "
            "suspect), refused (a job refused for a likely typo) or stopped (a run Recovery stopped: resubmit).",
        ),
        Field("cluster", str),
        Field("at", dt.datetime, nullable=True, description="When it began (paused, decided, turned suspect)."),
        Field("title", str),
        Field("detail", str),
        Field(
            "dashboard_path",
            str,
            description="Where the dashboard shows it, below the service root (add RECOVERY_URL_PREFIX).",
        ),
        Field("slurm_job_id", int, nullable=True),
        Field("attempt_index", int, nullable=True),
        Field("advice_id", int, nullable=True),
        Field("node", str, nullable=True),
    ),
)


def _count(key: str) -> Callable[[Any], int]:
    return lambda day: int(day.counts.get(key, 0))


# Of an app.advice.today.Day: what the home page (/dashboard) shows, from the same read.
OPERATOR_DAY = ReadModel(
    "OperatorDay",
    (
        Field("since", dt.datetime, description="Start of the range the counters cover."),
        Field("hours", int),
        Field("cluster", str, nullable=True, description="The cluster asked for; null: every cluster."),
        Field("failures", int, source=_count("failures"), description="Attempts that crashed or hung (or got Advice)."),
        Field("recovered", int, source=_count("recovered"), description="Restarts Recovery carried out and verified."),
        Field(
            "stopped", int, source=_count("stopped"), description="Runs Recovery stopped (terminate, veto, abandoned)."
        ),
        Field(
            "observe_only",
            int,
            source=_count("observe_only"),
            description="Decisions in observe mode: recorded, never carried out, nothing to approve.",
        ),
        Field("held", int, source=_count("held"), description="Restarts held by a budget or a storm, now."),
        Field("refused", int, source=_count("refused"), description="Jobs asked for Recovery and not enrolled."),
        Field("suspect_nodes", int, source=_count("suspect_nodes"), description="Nodes suspect (or pinned) now."),
        Field("needs_someone", int, description="How many lines needsYou has (each list shows at most 20)."),
        Resolved("needs_you"),
        Field("needs_you", (list, dict), graphql=False, source=Given),
    ),
)
