"""Durable worker state: adoption of unobserved failures, hang timers, advisor positions.

Revision ID: 0004
Revises: 0005 (assigned 0003; re-chained after 0005 reached main first)
Create Date: 2026-12-01 09:20:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import app.infra.db

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("first_seen_running_at", app.infra.db.UTCDateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("adopted_at", app.infra.db.UTCDateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("adopted_reason", sa.Text(), nullable=True))
    # Attempts recorded before this revision count as seen when they were recorded: an upgrade keeps
    # deciding what the old version saw, and what it registered already ended stays history.
    op.execute("UPDATE attempts SET first_seen_running_at = created_at")
    with op.batch_alter_table("log_sources", schema=None) as batch_op:
        batch_op.add_column(sa.Column("hang_episode", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("hang_delay_started_at", app.infra.db.UTCDateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("hang_checked_at", app.infra.db.UTCDateTime(timezone=True), nullable=True))
    op.create_table(
        "worker_positions",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_worker_positions")),
    )


def downgrade() -> None:
    op.drop_table("worker_positions")
    with op.batch_alter_table("log_sources", schema=None) as batch_op:
        batch_op.drop_column("hang_checked_at")
        batch_op.drop_column("hang_delay_started_at")
        batch_op.drop_column("hang_episode")
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.drop_column("adopted_reason")
        batch_op.drop_column("adopted_at")
        batch_op.drop_column("first_seen_running_at")
