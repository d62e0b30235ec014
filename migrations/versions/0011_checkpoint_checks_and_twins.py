"""Advice keeps the checkpoint check made before release and the singleton twin it releases; attempts their
first progress line (goodput).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01 12:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import app.infra.db

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("advice", schema=None) as batch_op:
        batch_op.add_column(sa.Column("checkpoint_check", sa.JSON(), nullable=True))
        batch_op.add_column(
            sa.Column("successor_job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True)
        )
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("first_progress_at", app.infra.db.UTCDateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.drop_column("first_progress_at")
    with op.batch_alter_table("advice", schema=None) as batch_op:
        batch_op.drop_column("successor_job_id")
        batch_op.drop_column("checkpoint_check")
