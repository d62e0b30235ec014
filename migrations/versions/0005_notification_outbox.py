"""Notification outbox: one row per event worth telling people (written with the change), one delivery per target.

Revision ID: 0005
Revises: 0003
Create Date: 2026-12-01 09:03:45.935918
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import app.infra.db

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "notifications",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("dedup_key", sa.String(length=200), nullable=False),
        sa.Column("event", sa.String(length=32), nullable=False),
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("slurm_job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("attempt_index", sa.Integer(), nullable=True),
        sa.Column("advice_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("generation", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("link_path", sa.Text(), nullable=True),
        sa.Column("fanned_out", sa.Boolean(), nullable=False),
        sa.Column("created_at", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notifications")),
        sa.UniqueConstraint("dedup_key", name=op.f("uq_notifications_dedup_key")),
    )
    with op.batch_alter_table("notifications", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_notifications_fanned_out_id"), ["fanned_out", "id"], unique=False)

    op.create_table(
        "notification_deliveries",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("notification_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("target", sa.String(length=32), nullable=False),
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("slurm_job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("tries", sa.Integer(), nullable=False),
        sa.Column("next_try_at", app.infra.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("sent_at", app.infra.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("created_at", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["notification_id"],
            ["notifications.id"],
            name=op.f("fk_notification_deliveries_notification_id_notifications"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notification_deliveries")),
        sa.UniqueConstraint(
            "notification_id", "target", name=op.f("uq_notification_deliveries_notification_id_target")
        ),
    )
    with op.batch_alter_table("notification_deliveries", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_notification_deliveries_status_cluster_id"), ["status", "cluster", "id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("notification_deliveries", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_notification_deliveries_status_cluster_id"))

    op.drop_table("notification_deliveries")
    with op.batch_alter_table("notifications", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_notifications_fanned_out_id"))

    op.drop_table("notifications")
