"""ORM models of fleet-wide trust: restart grants and holds (budgets), storm pauses, node blames and node standing."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, Boolean, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.infra.db import Base, BigId, UTCDateTime, utcnow


class RestartGrant(Base):
    """One automatic restart the controller was allowed to begin (once per Advice): what budgets count."""

    __tablename__ = "restart_grants"
    __table_args__ = (
        Index(None, "cluster", "granted_at"),
        Index(None, "workflow_id", "granted_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    advice_id: Mapped[int] = mapped_column(BigId, unique=True)
    cluster: Mapped[str] = mapped_column(String(128))
    workflow_id: Mapped[int | None] = mapped_column(BigId)
    job_id: Mapped[int] = mapped_column(BigId)
    granted_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    granted_by: Mapped[str | None] = mapped_column(String(256))  # None: the budget had room; else the operator


class RecoveryHold(Base):
    """An Advice held past a budget: not carried out until an operator releases it or extends the budget."""

    __tablename__ = "recovery_holds"
    __table_args__ = (Index(None, "cluster", "released_at", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    advice_id: Mapped[int] = mapped_column(BigId, unique=True)
    cluster: Mapped[str] = mapped_column(String(128))
    workflow_id: Mapped[int | None] = mapped_column(BigId)
    job_id: Mapped[int] = mapped_column(BigId)
    slurm_job_id: Mapped[int] = mapped_column(BigId)
    attempt_index: Mapped[int] = mapped_column(Integer)
    budget: Mapped[str] = mapped_column(String(16))  # workflow | cluster
    message: Mapped[str] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    released_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    released_by: Mapped[str | None] = mapped_column(String(256))
    release_note: Mapped[str | None] = mapped_column(Text)


class BudgetExtension(Base):
    """Extra automatic restarts an operator granted to a workflow (or a whole cluster) until it expires."""

    __tablename__ = "budget_extensions"
    __table_args__ = (Index(None, "cluster", "expires_at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    cluster: Mapped[str] = mapped_column(String(128))
    workflow_id: Mapped[int | None] = mapped_column(BigId)  # None: the cluster's budget
    extra: Mapped[int] = mapped_column(Integer)
    expires_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    created_by: Mapped[str] = mapped_column(String(256))
    reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class ClusterPause(Base):
    """A restart storm: automatic action on the cluster is paused until an operator confirms."""

    __tablename__ = "cluster_pauses"
    __table_args__ = (Index(None, "cluster", "confirmed_at", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    cluster: Mapped[str] = mapped_column(String(128))
    message: Mapped[str] = mapped_column(Text)
    jobs: Mapped[list[int]] = mapped_column(JSON, default=list)  # Slurm job ids of the failures counted
    started_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    confirmed_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    confirmed_by: Mapped[str | None] = mapped_column(String(256))
    confirm_note: Mapped[str | None] = mapped_column(Text)


class NodeBlame(Base):
    """Hardware/infrastructure evidence that named a node in one attempt (the basis of its reputation)."""

    __tablename__ = "node_blames"
    __table_args__ = (
        UniqueConstraint("cluster", "node", "attempt_id"),
        Index(None, "cluster", "node", "blamed_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    cluster: Mapped[str] = mapped_column(String(128))
    node: Mapped[str] = mapped_column(String(256))
    job_id: Mapped[int] = mapped_column(BigId)
    attempt_id: Mapped[int] = mapped_column(BigId)
    slurm_job_id: Mapped[int] = mapped_column(BigId)
    attempt_index: Mapped[int] = mapped_column(Integer)
    category: Mapped[str | None] = mapped_column(String(64))
    outlook: Mapped[str | None] = mapped_column(String(32))
    evidence: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    blamed_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class NodeStanding(Base):
    """A node's standing on its cluster: suspect until, pinned or cleared by an operator, and its drain."""

    __tablename__ = "node_standings"
    __table_args__ = (UniqueConstraint("cluster", "node"), Index(None, "cluster", "suspect_until"))

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    cluster: Mapped[str] = mapped_column(String(128))
    node: Mapped[str] = mapped_column(String(256))
    state: Mapped[str] = mapped_column(String(16), default="OK")  # OK | SUSPECT | PINNED | CLEARED | EXPIRED
    suspect_until: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    suspect_since: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    jobs: Mapped[list[int]] = mapped_column(JSON, default=list)  # Slurm job ids blamed within the window
    pinned: Mapped[bool] = mapped_column(Boolean, default=False)
    cleared_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    changed_by: Mapped[str | None] = mapped_column(String(256))
    drain_status: Mapped[str | None] = mapped_column(String(16))  # SHADOW | SENT | DRAINED | REFUSED | FAILED
    drain_message: Mapped[str | None] = mapped_column(Text)
    drain_partition: Mapped[str | None] = mapped_column(String(256))
    drained_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
