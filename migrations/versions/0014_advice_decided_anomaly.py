"""Advice records the anomaly it was decided on (the root cause of a crash, the hang of a NO_PROGRESS), so
every surface that cites evidence cites that one, not the attempt's newest anomaly.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05 09:50:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("advice", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("anomaly_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("advice", schema=None) as batch_op:
        batch_op.drop_column("anomaly_id")
