"""Fleet-wide trust: restart grants and budget holds, budget extensions, storm pauses, node blames and standings.

Revision ID: 0010
Revises: 0008
Create Date: 2026-12-01 12:16:21.414920
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import app.infra.db

revision: str = "0010"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "budget_extensions",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("workflow_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("extra", sa.Integer(), nullable=False),
        sa.Column("expires_at", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(length=256), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_at", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_budget_extensions")),
    )
    with op.batch_alter_table("budget_extensions", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_budget_extensions_cluster_expires_at"), ["cluster", "expires_at"], unique=False
        )

    op.create_table(
        "cluster_pauses",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("jobs", sa.JSON(), nullable=False),
        sa.Column("started_at", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("confirmed_at", app.infra.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("confirmed_by", sa.String(length=256), nullable=True),
        sa.Column("confirm_note", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cluster_pauses")),
    )
    with op.batch_alter_table("cluster_pauses", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_cluster_pauses_cluster_confirmed_at_id"), ["cluster", "confirmed_at", "id"], unique=False
        )

    op.create_table(
        "node_blames",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("node", sa.String(length=256), nullable=False),
        sa.Column("job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("attempt_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("slurm_job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("attempt_index", sa.Integer(), nullable=False),
        sa.Column("category", sa.String(length=64), nullable=True),
        sa.Column("outlook", sa.String(length=32), nullable=True),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.Column("blamed_at", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_node_blames")),
        sa.UniqueConstraint("cluster", "node", "attempt_id", name=op.f("uq_node_blames_cluster_node_attempt_id")),
    )
    with op.batch_alter_table("node_blames", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_node_blames_cluster_node_blamed_at"), ["cluster", "node", "blamed_at"], unique=False
        )

    op.create_table(
        "node_standings",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("node", sa.String(length=256), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("suspect_until", app.infra.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("suspect_since", app.infra.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("jobs", sa.JSON(), nullable=False),
        sa.Column("pinned", sa.Boolean(), nullable=False),
        sa.Column("cleared_at", app.infra.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("changed_by", sa.String(length=256), nullable=True),
        sa.Column("drain_status", sa.String(length=16), nullable=True),
        sa.Column("drain_message", sa.Text(), nullable=True),
        sa.Column("drain_partition", sa.String(length=256), nullable=True),
        sa.Column("drained_at", app.infra.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("updated_at", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_node_standings")),
        sa.UniqueConstraint("cluster", "node", name=op.f("uq_node_standings_cluster_node")),
    )
    with op.batch_alter_table("node_standings", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_node_standings_cluster_suspect_until"), ["cluster", "suspect_until"], unique=False
        )

    op.create_table(
        "recovery_holds",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("advice_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("workflow_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("slurm_job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("attempt_index", sa.Integer(), nullable=False),
        sa.Column("budget", sa.String(length=16), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("created_at", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("released_at", app.infra.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("released_by", sa.String(length=256), nullable=True),
        sa.Column("release_note", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_recovery_holds")),
        sa.UniqueConstraint("advice_id", name=op.f("uq_recovery_holds_advice_id")),
    )
    with op.batch_alter_table("recovery_holds", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_recovery_holds_cluster_released_at_id"), ["cluster", "released_at", "id"], unique=False
        )

    op.create_table(
        "restart_grants",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("advice_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("workflow_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("granted_at", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("granted_by", sa.String(length=256), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_restart_grants")),
        sa.UniqueConstraint("advice_id", name=op.f("uq_restart_grants_advice_id")),
    )
    with op.batch_alter_table("restart_grants", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_restart_grants_cluster_granted_at"), ["cluster", "granted_at"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_restart_grants_workflow_id_granted_at"), ["workflow_id", "granted_at"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("restart_grants", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_restart_grants_workflow_id_granted_at"))
        batch_op.drop_index(batch_op.f("ix_restart_grants_cluster_granted_at"))

    op.drop_table("restart_grants")
    with op.batch_alter_table("recovery_holds", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_recovery_holds_cluster_released_at_id"))

    op.drop_table("recovery_holds")
    with op.batch_alter_table("node_standings", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_node_standings_cluster_suspect_until"))

    op.drop_table("node_standings")
    with op.batch_alter_table("node_blames", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_node_blames_cluster_node_blamed_at"))

    op.drop_table("node_blames")
    with op.batch_alter_table("cluster_pauses", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_cluster_pauses_cluster_confirmed_at_id"))

    op.drop_table("cluster_pauses")
    with op.batch_alter_table("budget_extensions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_budget_extensions_cluster_expires_at"))

    op.drop_table("budget_extensions")
