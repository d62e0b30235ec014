"""Pushed job logs (Loki push API, OTLP/HTTP): the streams collectors push and each pushed line's identity.

`pushed_lines.line_key` (stream, time, text) makes a replayed line a no-op; rows older than
RECOVERY_PUSH_RETENTION are deleted by the push endpoint's periodic sweep (index on received_at).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-05 23:55:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import app.infra.db

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "push_streams",
        sa.Column("id", BigId, nullable=False),
        sa.Column("stream_key", sa.String(length=64), nullable=False),
        sa.Column("collector", sa.String(length=128), nullable=False),
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("slurm_job_id", BigId, nullable=True),
        sa.Column("attempt_label", sa.Integer(), nullable=True),
        sa.Column("node", sa.String(length=256), nullable=True),
        sa.Column("filename", sa.Text(), nullable=True),
        sa.Column("log_source_id", BigId, nullable=True),
        sa.Column("last_push_at", app.infra.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("latest_line_time", app.infra.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("lines", BigId, nullable=False),
        sa.Column("replayed", BigId, nullable=False),
        sa.Column("observed_time", BigId, nullable=False),
        sa.Column("no_timestamp", BigId, nullable=False),
        sa.Column("rewritten_time", BigId, nullable=False),
        sa.Column("dropped", BigId, nullable=False),
        sa.Column("drop_reason", sa.String(length=64), nullable=True),
        sa.Column("created_at", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["log_source_id"],
            ["log_sources.id"],
            name=op.f("fk_push_streams_log_source_id_log_sources"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_push_streams")),
        sa.UniqueConstraint("stream_key", name=op.f("uq_push_streams_stream_key")),
    )
    op.create_index(op.f("ix_push_streams_collector_node"), "push_streams", ["collector", "node"])
    op.create_index(op.f("ix_push_streams_cluster_slurm_job_id"), "push_streams", ["cluster", "slurm_job_id"])
    op.create_table(
        "pushed_lines",
        sa.Column("id", BigId, nullable=False),
        sa.Column("line_key", sa.String(length=32), nullable=False),
        sa.Column("stream_id", BigId, nullable=False),
        sa.Column("time_ns", BigId, nullable=False),
        sa.Column("time_kind", sa.String(length=16), nullable=False),
        sa.Column("line", sa.Text(), nullable=False),
        sa.Column("received_at", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["stream_id"], ["push_streams.id"], name=op.f("fk_pushed_lines_stream_id_push_streams"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pushed_lines")),
        sa.UniqueConstraint("line_key", name=op.f("uq_pushed_lines_line_key")),
    )
    op.create_index(op.f("ix_pushed_lines_stream_id_id"), "pushed_lines", ["stream_id", "id"])
    op.create_index(op.f("ix_pushed_lines_received_at"), "pushed_lines", ["received_at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_pushed_lines_received_at"), table_name="pushed_lines")
    op.drop_index(op.f("ix_pushed_lines_stream_id_id"), table_name="pushed_lines")
    op.drop_table("pushed_lines")
    op.drop_index(op.f("ix_push_streams_cluster_slurm_job_id"), table_name="push_streams")
    op.drop_index(op.f("ix_push_streams_collector_node"), table_name="push_streams")
    op.drop_table("push_streams")
