"""Log sources keep the reader's whole position and the detectors' state; pending events keep their meaning.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 12:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import app.infra.db

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BIG = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("log_sources", schema=None) as batch_op:
        batch_op.add_column(sa.Column("head_length", _BIG, server_default="0", nullable=False))
        batch_op.add_column(sa.Column("skipping", sa.Boolean(), server_default=sa.false(), nullable=False))
        batch_op.add_column(sa.Column("progress_offset", _BIG, nullable=True))
        batch_op.add_column(sa.Column("progress_line_number", _BIG, nullable=True))
        batch_op.add_column(sa.Column("progress_attempt_id", _BIG, nullable=True))
        batch_op.add_column(sa.Column("slowdown", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("closed_at", app.infra.db.UTCDateTime(timezone=True), nullable=True))
        batch_op.create_index(batch_op.f("ix_log_sources_attempt_id"), ["attempt_id"], unique=False)
    with op.batch_alter_table("pending_log_events", schema=None) as batch_op:
        batch_op.add_column(sa.Column("signal", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("reason", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("pending_log_events", schema=None) as batch_op:
        batch_op.drop_column("reason")
        batch_op.drop_column("signal")
    with op.batch_alter_table("log_sources", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_log_sources_attempt_id"))
        batch_op.drop_column("closed_at")
        batch_op.drop_column("slowdown")
        batch_op.drop_column("progress_attempt_id")
        batch_op.drop_column("progress_line_number")
        batch_op.drop_column("progress_offset")
        batch_op.drop_column("skipping")
        batch_op.drop_column("head_length")
