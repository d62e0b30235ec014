"""Jobs keep Slurm's numeric uid/gid (whose rights their files are read with); log sources what was refused.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05 09:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BIG = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("user_id", _BIG, nullable=True))
        batch_op.add_column(sa.Column("group_id", _BIG, nullable=True))
    with op.batch_alter_table("log_sources", schema=None) as batch_op:
        batch_op.add_column(sa.Column("refused_reason", sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column("refusals", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("log_sources", schema=None) as batch_op:
        batch_op.drop_column("refusals")
        batch_op.drop_column("refused_reason")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("group_id")
        batch_op.drop_column("user_id")
