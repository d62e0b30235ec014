"""Initial schema: workflows, jobs, attempts, policies, evidence, Advice, audit, change feed, leases.

Revision ID: 0001
Revises:
Create Date: 2026-11-30 03:42:13.513950
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import app.infra.db

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "audit_events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("component", sa.String(length=32), nullable=False),
        sa.Column("event_type", sa.String(length=96), nullable=False),
        sa.Column("level", sa.String(length=8), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("cluster", sa.String(length=128), nullable=True),
        sa.Column("slurm_job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("attempt_index", sa.Integer(), nullable=True),
        sa.Column("workflow_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("actor", sa.String(length=256), nullable=True),
        sa.Column("produced_at", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("recorded_at", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_events")),
    )
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_audit_events_component_produced_at_id"), ["component", "produced_at", "id"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_audit_events_event_type_produced_at_id"), ["event_type", "produced_at", "id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_audit_events_produced_at_id"), ["produced_at", "id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_audit_events_slurm_job_id_attempt_index_produced_at_id"),
            ["slurm_job_id", "attempt_index", "produced_at", "id"],
            unique=False,
        )

    op.create_table(
        "change_feed",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("topic", sa.String(length=32), nullable=False),
        sa.Column("entity_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("cluster", sa.String(length=128), nullable=True),
        sa.Column("workflow_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("slurm_job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("attempt_index", sa.Integer(), nullable=True),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("created_at", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_change_feed")),
    )
    with op.batch_alter_table("change_feed", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_change_feed_topic_id"), ["topic", "id"], unique=False)

    op.create_table(
        "worker_leases",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("holder", sa.String(length=256), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("acquired_at", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("renewed_at", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_worker_leases")),
    )
    op.create_table(
        "workflows",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("environment", sa.String(length=128), nullable=False),
        sa.Column("workflow_key", sa.String(length=256), nullable=False),
        sa.Column("latest_state", sa.String(length=32), nullable=True),
        sa.Column("latest_job_name", sa.String(length=256), nullable=True),
        sa.Column("attempt_count", sa.Integer(), nullable=False),
        sa.Column("failed_attempt_count", sa.Integer(), nullable=False),
        sa.Column("created_at", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workflows")),
        sa.UniqueConstraint("cluster", "workflow_key", name=op.f("uq_workflows_cluster_workflow_key")),
    )
    with op.batch_alter_table("workflows", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_workflows_updated_at_id"), ["updated_at", "id"], unique=False)

    op.create_table(
        "jobs",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("slurm_job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("incarnation", sa.Integer(), nullable=False),
        sa.Column("workflow_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("name", sa.String(length=256), nullable=True),
        sa.Column("user", sa.String(length=128), nullable=True),
        sa.Column("partition", sa.String(length=256), nullable=True),
        sa.Column("submit_time", app.infra.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("comment", sa.Text(), nullable=True),
        sa.Column("enrolment", sa.String(length=32), nullable=False),
        sa.Column("enrolment_reason", sa.Text(), nullable=True),
        sa.Column("requested_mode", sa.String(length=16), nullable=True),
        sa.Column("effective_mode", sa.String(length=16), nullable=False),
        sa.Column("mode_reason", sa.Text(), nullable=True),
        sa.Column("requeue_eligible", sa.Boolean(), nullable=True),
        sa.Column("shared_log_paths", sa.Boolean(), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=True),
        sa.Column("restart_count", sa.Integer(), nullable=False),
        sa.Column("retired_at", app.infra.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("last_seen_at", app.infra.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("created_at", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["workflow_id"], ["workflows.id"], name=op.f("fk_jobs_workflow_id_workflows"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
        sa.UniqueConstraint(
            "cluster", "slurm_job_id", "incarnation", name=op.f("uq_jobs_cluster_slurm_job_id_incarnation")
        ),
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_jobs_slurm_job_id"), ["slurm_job_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_jobs_workflow_id_id"), ["workflow_id", "id"], unique=False)

    op.create_table(
        "attempts",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("workflow_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("slurm_job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("attempt_index", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("state_reason", sa.Text(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("exit_signal", sa.Integer(), nullable=True),
        sa.Column("nodes", sa.JSON(), nullable=False),
        sa.Column("stdout_path", sa.Text(), nullable=True),
        sa.Column("stderr_path", sa.Text(), nullable=True),
        sa.Column("requeue_eligible", sa.Boolean(), nullable=True),
        sa.Column("held", sa.Boolean(), nullable=False),
        sa.Column("excluded_nodes", sa.JSON(), nullable=False),
        sa.Column("start_time", app.infra.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("end_time", app.infra.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("ended_reason", sa.Text(), nullable=True),
        sa.Column("created_at", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_attempts_job_id_jobs"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(
            ["workflow_id"], ["workflows.id"], name=op.f("fk_attempts_workflow_id_workflows"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_attempts")),
        sa.UniqueConstraint("job_id", "attempt_index", name=op.f("uq_attempts_job_id_attempt_index")),
        sa.UniqueConstraint("uuid", name=op.f("uq_attempts_uuid")),
    )
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_attempts_cluster_slurm_job_id_attempt_index"),
            ["cluster", "slurm_job_id", "attempt_index"],
            unique=False,
        )
        batch_op.create_index(batch_op.f("ix_attempts_updated_at_id"), ["updated_at", "id"], unique=False)

    op.create_table(
        "policies",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("wrapper", sa.String(length=16), nullable=True),
        sa.Column("valid", sa.Boolean(), nullable=False),
        sa.Column("effective", sa.JSON(), nullable=True),
        sa.Column("warnings", sa.JSON(), nullable=False),
        sa.Column("errors", sa.JSON(), nullable=False),
        sa.Column("created_at", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_policies_job_id_jobs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_policies")),
        sa.UniqueConstraint("job_id", name=op.f("uq_policies_job_id")),
    )
    op.create_table(
        "advice",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("attempt_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("slurm_job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("attempt_index", sa.Integer(), nullable=False),
        sa.Column("operation", sa.String(length=16), nullable=False),
        sa.Column("exclusions", sa.JSON(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("rule", sa.String(length=64), nullable=True),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.Column("generation", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("mode_reason", sa.Text(), nullable=True),
        sa.Column("expires_at", app.infra.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("review", sa.String(length=16), nullable=True),
        sa.Column("reviewed_by", sa.String(length=256), nullable=True),
        sa.Column("disposition", sa.String(length=16), nullable=False),
        sa.Column("disposition_reason", sa.String(length=64), nullable=True),
        sa.Column("disposition_message", sa.Text(), nullable=True),
        sa.Column("observed_generation", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("next_reconcile_at", app.infra.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("reconcile_failures", sa.Integer(), nullable=False),
        sa.Column("created_at", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["attempt_id"], ["attempts.id"], name=op.f("fk_advice_attempt_id_attempts"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_advice_job_id_jobs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_advice")),
        sa.UniqueConstraint("attempt_id", name=op.f("uq_advice_attempt_id")),
    )
    with op.batch_alter_table("advice", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_advice_active_id"), ["active", "id"], unique=False)
        batch_op.create_index(batch_op.f("ix_advice_job_id_id"), ["job_id", "id"], unique=False)

    op.create_table(
        "anomalies",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("attempt_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("event_key", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("category", sa.String(length=64), nullable=False),
        sa.Column("detector", sa.String(length=32), nullable=False),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("node", sa.String(length=256), nullable=True),
        sa.Column("xid", sa.Integer(), nullable=True),
        sa.Column("log_path", sa.Text(), nullable=True),
        sa.Column("line_number", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("line", sa.Text(), nullable=True),
        sa.Column("source_time", app.infra.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.Column("detected_at", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["attempt_id"], ["attempts.id"], name=op.f("fk_anomalies_attempt_id_attempts"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_anomalies")),
        sa.UniqueConstraint("event_key", name=op.f("uq_anomalies_event_key")),
    )
    with op.batch_alter_table("anomalies", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_anomalies_attempt_id_id"), ["attempt_id", "id"], unique=False)

    op.create_table(
        "checkpoints",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("attempt_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("event_key", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("framework", sa.String(length=64), nullable=True),
        sa.Column("iteration", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("path", sa.Text(), nullable=True),
        sa.Column("log_path", sa.Text(), nullable=True),
        sa.Column("line_number", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("line", sa.Text(), nullable=True),
        sa.Column("source_time", app.infra.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("read_time", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["attempt_id"], ["attempts.id"], name=op.f("fk_checkpoints_attempt_id_attempts"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_checkpoints")),
        sa.UniqueConstraint("event_key", name=op.f("uq_checkpoints_event_key")),
    )
    with op.batch_alter_table("checkpoints", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_checkpoints_attempt_id_id"), ["attempt_id", "id"], unique=False)

    op.create_table(
        "log_sources",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("attempt_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("shared", sa.Boolean(), nullable=False),
        sa.Column("device", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("inode", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("offset", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("line_number", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("head_digest", sa.String(length=64), nullable=True),
        sa.Column("last_output_at", app.infra.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("last_read_at", app.infra.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("progress_phase", sa.String(length=32), nullable=True),
        sa.Column("progress_at", app.infra.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("progress_line", sa.Text(), nullable=True),
        sa.Column("created_at", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["attempt_id"], ["attempts.id"], name=op.f("fk_log_sources_attempt_id_attempts"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_log_sources_job_id_jobs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_log_sources")),
        sa.UniqueConstraint("path", "job_id", name=op.f("uq_log_sources_path_job_id")),
    )
    op.create_table(
        "pending_log_events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("log_source_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("event_key", sa.String(length=64), nullable=False),
        sa.Column("line_number", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("line", sa.Text(), nullable=False),
        sa.Column("source_time", app.infra.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("attempt_label", sa.Integer(), nullable=True),
        sa.Column("tries", sa.Integer(), nullable=False),
        sa.Column("next_try_at", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("read_time", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["log_source_id"],
            ["log_sources.id"],
            name=op.f("fk_pending_log_events_log_source_id_log_sources"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pending_log_events")),
        sa.UniqueConstraint("event_key", name=op.f("uq_pending_log_events_event_key")),
    )
    with op.batch_alter_table("pending_log_events", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_pending_log_events_next_try_at"), ["next_try_at"], unique=False)

    op.create_table(
        "scheduler_actions",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("advice_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("generation", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("step", sa.String(length=32), nullable=False),
        sa.Column("idempotency_key", sa.String(length=128), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("actor", sa.String(length=32), nullable=False),
        sa.Column("command", sa.Text(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("started_at", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("finished_at", app.infra.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("duration_ms", sa.Double(), nullable=True),
        sa.ForeignKeyConstraint(
            ["advice_id"], ["advice.id"], name=op.f("fk_scheduler_actions_advice_id_advice"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_scheduler_actions")),
        sa.UniqueConstraint("idempotency_key", name=op.f("uq_scheduler_actions_idempotency_key")),
    )
    with op.batch_alter_table("scheduler_actions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_scheduler_actions_advice_id_id"), ["advice_id", "id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("scheduler_actions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_scheduler_actions_advice_id_id"))

    op.drop_table("scheduler_actions")
    with op.batch_alter_table("pending_log_events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_pending_log_events_next_try_at"))

    op.drop_table("pending_log_events")
    op.drop_table("log_sources")
    with op.batch_alter_table("checkpoints", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_checkpoints_attempt_id_id"))

    op.drop_table("checkpoints")
    with op.batch_alter_table("anomalies", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_anomalies_attempt_id_id"))

    op.drop_table("anomalies")
    with op.batch_alter_table("advice", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_advice_job_id_id"))
        batch_op.drop_index(batch_op.f("ix_advice_active_id"))

    op.drop_table("advice")
    op.drop_table("policies")
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_attempts_updated_at_id"))
        batch_op.drop_index(batch_op.f("ix_attempts_cluster_slurm_job_id_attempt_index"))

    op.drop_table("attempts")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_jobs_workflow_id_id"))
        batch_op.drop_index(batch_op.f("ix_jobs_slurm_job_id"))

    op.drop_table("jobs")
    with op.batch_alter_table("workflows", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_workflows_updated_at_id"))

    op.drop_table("workflows")
    op.drop_table("worker_leases")
    with op.batch_alter_table("change_feed", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_change_feed_topic_id"))

    op.drop_table("change_feed")
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_audit_events_slurm_job_id_attempt_index_produced_at_id"))
        batch_op.drop_index(batch_op.f("ix_audit_events_produced_at_id"))
        batch_op.drop_index(batch_op.f("ix_audit_events_event_type_produced_at_id"))
        batch_op.drop_index(batch_op.f("ix_audit_events_component_produced_at_id"))

    op.drop_table("audit_events")
