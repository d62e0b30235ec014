"""Read models of Advice, its reconciliation and its scheduler actions: their fields as the APIs show them."""

from __future__ import annotations

import datetime as dt

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
