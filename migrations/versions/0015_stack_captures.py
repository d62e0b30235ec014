"""Stack captures: every rank's stack, state and flight-recorder position, taken right before Recovery ended a
hung, stalled or partly failed RUNNING attempt (one per attempt), with the merged stacks and the judgment.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06 00:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import app.infra.db

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "stack_captures",
        sa.Column("id", BIG, nullable=False),
        sa.Column("attempt_id", BIG, nullable=False),
        sa.Column("advice_id", BIG, nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("mode", sa.String(length=16), nullable=True),
        sa.Column("command", sa.Text(), nullable=False),
        sa.Column("duration_ms", sa.Float(), nullable=False),
        sa.Column("bytes", BIG, nullable=False),
        sa.Column("nodes_asked", sa.JSON(), nullable=False),
        sa.Column("nodes_answered", sa.JSON(), nullable=False),
        sa.Column("ranks", sa.JSON(), nullable=False),
        sa.Column("groups", sa.JSON(), nullable=False),
        sa.Column("judgment", sa.JSON(), nullable=True),
        sa.Column("reports", sa.JSON(), nullable=False),
        sa.Column("problems", sa.JSON(), nullable=False),
        sa.Column("anomaly_id", BIG, nullable=True),
        sa.Column("captured_at", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["attempt_id"], ["attempts.id"], name=op.f("fk_stack_captures_attempt_id_attempts"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stack_captures")),
        sa.UniqueConstraint("attempt_id", name=op.f("uq_stack_captures_attempt_id")),
    )


def downgrade() -> None:
    op.drop_table("stack_captures")
