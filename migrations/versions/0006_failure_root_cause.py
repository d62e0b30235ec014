"""Crash anomalies keep their retry outlook and blamed nodes with provenance; attempts keep Slurm's task layout.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 09:10:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("anomalies", schema=None) as batch_op:
        batch_op.add_column(sa.Column("outlook", sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column("blamed_nodes", sa.JSON(), nullable=True))
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("tasks_per_node", sa.String(length=256), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.drop_column("tasks_per_node")
    with op.batch_alter_table("anomalies", schema=None) as batch_op:
        batch_op.drop_column("blamed_nodes")
        batch_op.drop_column("outlook")
