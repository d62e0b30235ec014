"""Read models of workflows, jobs and attempts: their fields as the GraphQL and REST APIs show them."""

from __future__ import annotations

import datetime as dt
from typing import Any

from app.domain.control.identity import format_attempt_ref, format_scheduler_job_id
from app.infra.read_model_fields import Field, Given, GlobalId, ReadModel, Resolved

_ID = Field("id", GlobalId, description="Opaque global id.", rest=False)

WORKFLOW = ReadModel(
    "Workflow",
    (
        _ID,
        Field("row_id", int, source="id", graphql=False, rest_name="id"),
        Field(
            "key",
            str,
            source="workflow_key",
            rest_name="workflowId",
            description="The workflow_id of the jobs' policies (or job-<jobId> when they named none).",
        ),
        Field("cluster", str),
        Field("environment", str),
        Field("latest_state", str, nullable=True, description="State of the newest attempt."),
        Field("latest_job_name", str, nullable=True),
        Field("attempt_count", int),
        Field("failed_attempt_count", int),
        Field("created_at", dt.datetime),
        Field("updated_at", dt.datetime),
    ),
)

JOB = ReadModel(
    "Job",
    (
        _ID,
        Field("job_id", int, source="slurm_job_id", description="The Slurm job id."),
        Field("cluster", str),
        Field(
            "incarnation",
            int,
            description="0 for the first submission seen with this job id; higher after job-id reuse.",
        ),
        Field(
            "scheduler_job_id",
            str,
            source=lambda row: format_scheduler_job_id(row.slurm_job_id, row.array_job_id, row.array_task_id),
            description="How Slurm's commands name exactly this job: `1234_7` for task 7 of array 1234, else the job "
            "id.",
        ),
        Field(
            "array_job_id",
            int,
            nullable=True,
            description="The job array's id when this job is one of its tasks (the last task's own jobId equals it).",
        ),
        Field(
            "array_task_id",
            int,
            nullable=True,
            description="The task index within its array (null for other jobs and not yet split records).",
        ),
        Resolved("array_tasks"),
        Field("name", str, nullable=True),
        Field("user", str, nullable=True),
        Field("partition", str, nullable=True),
        Field("submit_time", dt.datetime, nullable=True),
        Field("comment", str, nullable=True, description="The raw Slurm comment."),
        Field("enrolment", str, description="ENROLLED, NOT_ENROLLED, ENVIRONMENT_MISMATCH or UNMANAGED_PARTITION."),
        Field("enrolment_reason", str, nullable=True),
        Field("requested_mode", str, nullable=True),
        Resolved("effective_mode"),
        Resolved("mode_reason"),
        Field(
            "mode_at_registration",
            str,
            source="registered_mode",
            description="observe or act as resolved when the job was registered (a record, not the mode now).",
        ),
        Resolved("story"),
        Field(
            "mode_reason_at_registration",
            str,
            nullable=True,
            source="mode_reason",
            description="Why modeAtRegistration applied when the job was registered.",
        ),
        Field("requeue_eligible", bool, nullable=True),
        Field("state", str, nullable=True),
        Field("restart_count", int),
        Field(
            "retired_at",
            dt.datetime,
            nullable=True,
            description="When a new submission reused this job id (null while current).",
        ),
        Field("last_seen_at", dt.datetime, nullable=True),
    ),
)

# REST: the attempt with what its job and workflow add (the handler gives those; the user guide's field names).
ATTEMPT = ReadModel(
    "Attempt",
    (
        _ID,
        Field("job_id", int, source="slurm_job_id", description="The Slurm job id."),
        Field("attempt_index", int, description="0 for the first execution; Slurm's restart count."),
        Field(
            "heimdall_job_id",
            str,
            source="uuid",
            description="The attempt's stable UUID, derived from cluster, job id and attempt index.",
        ),
        Field(
            "attempt_ref",
            str,
            source=lambda row: format_attempt_ref(row.slurm_job_id, row.attempt_index),
            description='"<jobId>-<attemptIndex>", accepted wherever an attempt is looked up.',
        ),
        Field("cluster", str),
        Field("workflow_id", str, nullable=True, graphql=False, source=Given),
        Field("job_name", str, nullable=True, graphql=False, source=Given),
        Field("array_job_id", int, nullable=True, graphql=False, source=Given),
        Field("array_task_id", int, nullable=True, graphql=False, source=Given),
        Field("scheduler_job_id", str, graphql=False, source=Given),
        Field("state", str),
        Field("state_reason", str, nullable=True),
        Field("exit_code", int, nullable=True),
        Field("exit_signal", int, nullable=True),
        Field("nodes", (list, str)),
        Field("excluded_nodes", (list, str), description="Nodes Slurm was told to avoid for this attempt."),
        Field("stdout_path", str, nullable=True),
        Field("stderr_path", str, nullable=True),
        Resolved("requeue_eligible"),
        Field("requeue_eligible", bool, nullable=True, graphql=False, source=Given),
        Field("held", bool),
        Field("effective_mode", str, nullable=True, graphql=False, source=Given),
        Field("mode_reason", str, nullable=True, graphql=False, source=Given),
        Field("mode_at_registration", str, nullable=True, graphql=False, source=Given),
        Field("start_time", dt.datetime, nullable=True),
        Field("end_time", dt.datetime, nullable=True),
        Field("ended_reason", str, nullable=True),
        Field("created_at", dt.datetime),
        Field("updated_at", dt.datetime),
    ),
)


def _policy(key: str, section: str | None = None) -> Any:
    """A value of the effective policy (in `section` when given)."""

    def read(row: Any) -> Any:
        effective = row.effective or {}
        if section:
            effective = effective.get(section) or {}
        return effective.get(key)

    return read


def _policy_field(key: str, kind: Any, section: str | None = None, *, description: str | None = None) -> Field:
    """A value of the effective policy under its own key's name: null when the policy leaves it out."""
    return Field(key, kind, nullable=True, source=_policy(key, section), description=description)


_DETECTION = "anomaly_detection_config"
POLICY = ReadModel(
    "Policy",
    (
        Field("wrapper", str, nullable=True, description="`APS` or `HEIMDALL`; null when the comment had no wrapper."),
        Field("valid", bool),
        Field(
            "effective",
            dict,
            nullable=True,
            description="The whole effective policy (defaults filled in; unknown keys kept).",
        ),
        Field(
            "warnings",
            dict,
            source=lambda row: row.warnings or [],
            description="Findings that do not stop enrolment (e.g. unknown keys), each {path, message}.",
        ),
        Field(
            "errors",
            dict,
            source=lambda row: row.errors or [],
            description="Validation errors, each {path, message} with the JSON path of the bad value.",
        ),
        _policy_field("workflow_id", str),
        _policy_field("environment", str),
        _policy_field(
            "mode", str, description="Requested mode (observe | act); see Attempt.effectiveMode for what applies."
        ),
        _policy_field("auto_resume_mode", str),
        _policy_field(
            "max_requeue_times", int, description="The job's own retry request; null means the site ceiling applies."
        ),
        _policy_field("log_file_paths_shared_across_attempts", bool),
        _policy_field("log_based_timeout_enabled", bool, _DETECTION),
        _policy_field(
            "log_based_timeout_threshold_pretraining",
            int,
            _DETECTION,
            description="Hang threshold before the training loop, seconds.",
        ),
        _policy_field(
            "log_based_timeout_threshold_trainingloop",
            int,
            _DETECTION,
            description="Hang threshold inside the training loop, seconds.",
        ),
        _policy_field("straggler_detection_enabled", bool, _DETECTION),
    ),
)
