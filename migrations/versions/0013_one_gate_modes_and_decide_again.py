"""The job's mode at registration is named so (registered_mode); Advice may be decided again (decision rounds);
scheduler actions keep the one gate's answer.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05 09:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.alter_column(
            "effective_mode",
            new_column_name="registered_mode",
            existing_type=sa.String(length=16),
            existing_nullable=False,
        )
    with op.batch_alter_table("advice", schema=None) as batch_op:
        batch_op.add_column(sa.Column("decision_round", sa.Integer(), server_default="1", nullable=False))
        batch_op.add_column(sa.Column("supersedes_id", BIG, nullable=True))
        batch_op.add_column(sa.Column("superseded_by_id", BIG, nullable=True))
        batch_op.drop_constraint("uq_advice_attempt_id", type_="unique")
        batch_op.create_unique_constraint(
            batch_op.f("uq_advice_attempt_id_decision_round"), ["attempt_id", "decision_round"]
        )
    with op.batch_alter_table("scheduler_actions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("gate", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("scheduler_actions", schema=None) as batch_op:
        batch_op.drop_column("gate")
    op.execute("DELETE FROM advice WHERE decision_round > 1")
    with op.batch_alter_table("advice", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("uq_advice_attempt_id_decision_round"), type_="unique")
        batch_op.create_unique_constraint("uq_advice_attempt_id", ["attempt_id"])
        batch_op.drop_column("superseded_by_id")
        batch_op.drop_column("supersedes_id")
        batch_op.drop_column("decision_round")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.alter_column(
            "registered_mode",
            new_column_name="effective_mode",
            existing_type=sa.String(length=16),
            existing_nullable=False,
        )
