"""Audit index for job-only filters: all attempts of a job, newest first, without a sort.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 04:39:09.977101
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_audit_events_slurm_job_id_produced_at_id"),
            ["slurm_job_id", "produced_at", "id"],
            unique=False,
        )


def downgrade() -> None:
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_audit_events_slurm_job_id_produced_at_id"))
