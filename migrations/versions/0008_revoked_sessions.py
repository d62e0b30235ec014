"""Revoked dashboard sessions: sign-out ends a session on the server, so a copied cookie stops working.

Revision ID: 0008
Revises: 0005
Create Date: 2026-12-01 09:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import app.infra.db

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "revoked_sessions",
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("subject", sa.String(length=256), nullable=False),
        sa.Column("revoked_at", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("expires_at", app.infra.db.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("session_id", name=op.f("pk_revoked_sessions")),
    )
    with op.batch_alter_table("revoked_sessions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_revoked_sessions_expires_at"), ["expires_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("revoked_sessions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_revoked_sessions_expires_at"))
    op.drop_table("revoked_sessions")
