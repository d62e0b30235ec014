"""ORM models for Advice and the scheduler actions (milestones) that reconcile it."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, Boolean, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.infra.db import Base, BigId, UTCDateTime, utcnow


class Advice(Base):
    """The durable decision about one attempt; a changed decision bumps the generation.

    An attempt has one Advice per decision round: round 1 from the advisor, round 2 when an operator decided an
    observe-mode failure again ("decide again now", app.advice.redecide), which supersedes round 1.
    """

    __tablename__ = "advice"
    __table_args__ = (
        Index(None, "active", "id"),
        Index(None, "job_id", "id"),
        UniqueConstraint("attempt_id", "decision_round"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id", ondelete="CASCADE"))
    decision_round: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    # The Advice this one decided again (round 2), and the one that decided this one again.
    supersedes_id: Mapped[int | None] = mapped_column(BigId)
    superseded_by_id: Mapped[int | None] = mapped_column(BigId)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    cluster: Mapped[str] = mapped_column(String(128))
    slurm_job_id: Mapped[int] = mapped_column(BigId)
    attempt_index: Mapped[int] = mapped_column(Integer)
    operation: Mapped[str] = mapped_column(String(16))  # RESTART | TERMINATE
    exclusions: Mapped[list[str]] = mapped_column(JSON, default=list)
    reason: Mapped[str] = mapped_column(Text)
    rule: Mapped[str | None] = mapped_column(String(64))
    evidence: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    generation: Mapped[int] = mapped_column(BigId, default=1)
    mode: Mapped[str] = mapped_column(String(16))  # act | observe
    mode_reason: Mapped[str | None] = mapped_column(Text)
    expires_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    # Operator review: None (not needed / not given), APPROVED, VETOED.
    review: Mapped[str | None] = mapped_column(String(16))
    reviewed_by: Mapped[str | None] = mapped_column(String(256))
    disposition: Mapped[str] = mapped_column(String(16), default="PENDING")
    disposition_reason: Mapped[str | None] = mapped_column(String(64))
    disposition_message: Mapped[str | None] = mapped_column(Text)
    observed_generation: Mapped[int | None] = mapped_column(BigId)
    next_reconcile_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    reconcile_failures: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    # The checkpoint check made before release (decision/checkpoint_rules.py CheckResult.as_dict), migration 0011.
    checkpoint_check: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # singleton_dependency: the Slurm job id of the held twin this Advice releases (migration 0011).
    successor_job_id: Mapped[int | None] = mapped_column(BigId)
    # The anomaly this generation was decided on: a crash's root cause, the NO_PROGRESS of a hang (migration 0012).
    # What every story, reason and notification cites; null for decisions on a Slurm state alone.
    anomaly_id: Mapped[int | None] = mapped_column(BigId)


class SchedulerAction(Base):
    """One scheduler command (or its shadow in observe mode) taken for an Advice generation."""

    __tablename__ = "scheduler_actions"
    __table_args__ = (Index(None, "advice_id", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    advice_id: Mapped[int] = mapped_column(ForeignKey("advice.id", ondelete="CASCADE"))
    generation: Mapped[int] = mapped_column(BigId)
    step: Mapped[str] = mapped_column(String(32))  # requeue_hold | update_exclusions | release | cancel
    idempotency_key: Mapped[str] = mapped_column(String(128), unique=True)
    status: Mapped[str] = mapped_column(String(16))  # STARTED | SUCCEEDED | SKIPPED | FAILED | SHADOW
    actor: Mapped[str] = mapped_column(String(32), default="controller")
    command: Mapped[str | None] = mapped_column(Text)
    detail: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    duration_ms: Mapped[float | None] = mapped_column()
    # The one gate's answer when it was taken (app.domain.decision.gate.GateAnswer.record): allowed, or why not sent.
    gate: Mapped[str | None] = mapped_column(Text)
