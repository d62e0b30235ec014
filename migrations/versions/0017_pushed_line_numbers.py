"""Pushed lines carry their line number in the stream, so the log view finds the lines around an evidence line.

`pushed_lines.line_number` is the stream's line number of the entry's first line (what evidence names); the
index on (stream_id, line_number) replaces (stream_id, id), which nothing reads any more. Rows pushed before
this revision have no number and are not shown by the log view.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06 04:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.add_column("pushed_lines", sa.Column("line_number", BigId, nullable=True))
    op.drop_index(op.f("ix_pushed_lines_stream_id_id"), table_name="pushed_lines")
    op.create_index(op.f("ix_pushed_lines_stream_id_line_number"), "pushed_lines", ["stream_id", "line_number"])


def downgrade() -> None:
    op.drop_index(op.f("ix_pushed_lines_stream_id_line_number"), table_name="pushed_lines")
    op.create_index(op.f("ix_pushed_lines_stream_id_id"), "pushed_lines", ["stream_id", "id"])
    with op.batch_alter_table("pushed_lines") as batch:
        batch.drop_column("line_number")
