"""ORM models for log sources (read offsets), checkpoints and anomalies."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, Boolean, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint, false
from sqlalchemy.orm import Mapped, mapped_column

from app.infra.db import Base, BigId, UTCDateTime, utcnow


class LogSource(Base):
    """A file the collector reads, with where it left off (survives restarts and rotation)."""

    __tablename__ = "log_sources"
    __table_args__ = (UniqueConstraint("path", "job_id"), Index(None, "attempt_id"))

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    path: Mapped[str] = mapped_column(Text)
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    # Set when the path identifies one attempt (per-attempt paths); null when shared.
    attempt_id: Mapped[int | None] = mapped_column(ForeignKey("attempts.id", ondelete="CASCADE"))
    shared: Mapped[bool] = mapped_column(default=False)
    device: Mapped[int | None] = mapped_column(BigId)
    inode: Mapped[int | None] = mapped_column(BigId)
    offset: Mapped[int] = mapped_column(BigId, default=0)
    line_number: Mapped[int] = mapped_column(BigId, default=0)
    # Identity of the file's first bytes, so truncation and replacement are noticed.
    head_digest: Mapped[str | None] = mapped_column(String(64))
    last_output_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    last_read_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    progress_phase: Mapped[str | None] = mapped_column(String(32))
    progress_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    progress_line: Mapped[str | None] = mapped_column(Text)
    # The reader's FilePosition, stored whole: bytes covered by head_digest, inside an over-long line.
    head_length: Mapped[int] = mapped_column(BigId, default=0, server_default="0")
    skipping: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # Where the latest progress marker was (re-delivered older markers never move the phase back).
    progress_offset: Mapped[int | None] = mapped_column(BigId)
    progress_line_number: Mapped[int | None] = mapped_column(BigId)
    # The attempt the latest marker belongs to: a shared file armed by attempt 0 does not arm attempt 1.
    progress_attempt_id: Mapped[int | None] = mapped_column(BigId)
    # Slowdown detector state (baseline, slow-since) per attempt, as JSON.
    slowdown: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # The hang detector's timer (survives restarts): the silence episode it belongs to (its start time),
    # when the threshold was seen exceeded (the query delay started), and when the delayed check ran.
    hang_episode: Mapped[str | None] = mapped_column(String(64))
    hang_delay_started_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    hang_checked_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    # Why the last open was refused (app/jobfiles/safe_open.py reasons; null: the file was accepted or not there yet),
    # and every reason already recorded as a log.refused event (each is recorded once).
    refused_reason: Mapped[str | None] = mapped_column(String(32))
    refusals: Mapped[list[str] | None] = mapped_column(JSON)
    # Set when the collector stopped reading it (attempt ended, final read done).
    closed_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class Checkpoint(Base):
    """A checkpoint saved/loaded line recognised in an attempt's log (evidence, not proof)."""

    __tablename__ = "checkpoints"
    __table_args__ = (Index(None, "attempt_id", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id", ondelete="CASCADE"))
    event_key: Mapped[str] = mapped_column(String(64), unique=True)
    kind: Mapped[str] = mapped_column(String(16))  # saved | loaded | failed
    framework: Mapped[str | None] = mapped_column(String(64))
    iteration: Mapped[int | None] = mapped_column(BigId)
    path: Mapped[str | None] = mapped_column(Text)
    log_path: Mapped[str | None] = mapped_column(Text)
    line_number: Mapped[int | None] = mapped_column(BigId)
    line: Mapped[str | None] = mapped_column(Text)
    source_time: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    read_time: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class Anomaly(Base):
    """Something wrong with an attempt: a crash line, no progress, a slowdown, a scheduler failure."""

    __tablename__ = "anomalies"
    __table_args__ = (Index(None, "attempt_id", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id", ondelete="CASCADE"))
    event_key: Mapped[str] = mapped_column(String(64), unique=True)
    kind: Mapped[str] = mapped_column(String(32))  # CRASH | NO_PROGRESS | SLOWDOWN | SCHEDULER_FAILURE
    category: Mapped[str] = mapped_column(String(64))
    detector: Mapped[str] = mapped_column(String(32))
    message: Mapped[str | None] = mapped_column(Text)
    node: Mapped[str | None] = mapped_column(String(256))
    xid: Mapped[int | None] = mapped_column(Integer)
    log_path: Mapped[str | None] = mapped_column(Text)
    line_number: Mapped[int | None] = mapped_column(BigId)
    line: Mapped[str | None] = mapped_column(Text)
    source_time: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    detected_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    # Crash anomalies: retry outlook (infrastructure | transient | application) and the nodes the
    # evidence blames, [{"node", "provenance": line | rank | allocation, "detail"}]; null on older rows.
    outlook: Mapped[str | None] = mapped_column(String(16))
    blamed_nodes: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON)


class PendingLogEvent(Base):
    """A log event from a shared path that waits (bounded redelivery) for its attempt to be known."""

    __tablename__ = "pending_log_events"
    __table_args__ = (Index(None, "next_try_at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    log_source_id: Mapped[int] = mapped_column(ForeignKey("log_sources.id", ondelete="CASCADE"))
    event_key: Mapped[str] = mapped_column(String(64), unique=True)
    line_number: Mapped[int] = mapped_column(BigId)
    line: Mapped[str] = mapped_column(Text)
    source_time: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    attempt_label: Mapped[int | None] = mapped_column(Integer)
    # What the line means (crash or checkpoint fields), so a retry does not need the file again.
    signal: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # Why it is still waiting (no_timestamp, ambiguous, outside_windows, label_not_registered).
    reason: Mapped[str | None] = mapped_column(String(64))
    tries: Mapped[int] = mapped_column(Integer, default=0)
    next_try_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    read_time: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class StackCapture(Base):
    """Every rank's stack, state and flight-recorder position, taken right before Recovery ended a RUNNING attempt."""

    __tablename__ = "stack_captures"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    # One capture per attempt: the first time Recovery was about to end it (act or observe mode).
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id", ondelete="CASCADE"), unique=True)
    advice_id: Mapped[int | None] = mapped_column(BigId)
    status: Mapped[str] = mapped_column(String(16))  # CAPTURED | PARTIAL | FAILED | TIMEOUT
    mode: Mapped[str | None] = mapped_column(String(16))  # the Advice's mode when it was taken (act | observe)
    command: Mapped[str] = mapped_column(Text)
    duration_ms: Mapped[float] = mapped_column(Float, default=0.0)
    bytes: Mapped[int] = mapped_column(BigId, default=0)
    nodes_asked: Mapped[list[str]] = mapped_column(JSON, default=list)
    nodes_answered: Mapped[list[str]] = mapped_column(JSON, default=list)
    # [{"rank", "node", "pid", "state", "wchan", "frames": [{"func", "file", "line"}], "error", ...}]
    ranks: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    # merged stacks: [{"ranks", "nodes", "where", "state", "wchan", "frames", "outlier"}]
    groups: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    judgment: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # the nodes' raw reports (py-spy and nvidia-smi text, bounded; flight-recorder positions, never its bytes)
    reports: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    problems: Mapped[list[str]] = mapped_column(JSON, default=list)
    anomaly_id: Mapped[int | None] = mapped_column(BigId)  # the anomaly the judgment recorded, if any
    captured_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
