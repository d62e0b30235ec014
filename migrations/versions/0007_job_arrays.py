"""Job arrays: the array id and task index of each job record, to name one task in Slurm's commands.

Revision ID: 0007
Revises: 0008
Create Date: 2026-12-01 09:10:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("array_job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True)
        )
        batch_op.add_column(sa.Column("array_task_id", sa.Integer(), nullable=True))
        batch_op.create_index(
            batch_op.f("ix_jobs_array_job_id_array_task_id"), ["array_job_id", "array_task_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_jobs_array_job_id_array_task_id"))
        batch_op.drop_column("array_task_id")
        batch_op.drop_column("array_job_id")
