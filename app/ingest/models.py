"""ORM models of pushed logs: the streams collectors push (with when they last did) and each pushed line's identity."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.infra.db import Base, BigId, UTCDateTime, utcnow


class PushStream(Base):
    """One label set a collector pushes (a file on a node), the log source its lines are recorded on, and counters."""

    __tablename__ = "push_streams"
    __table_args__ = (Index(None, "collector", "node"), Index(None, "cluster", "slurm_job_id"))

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    # sha256 of the sorted label set (the stream's identity across pushes and collector restarts)
    stream_key: Mapped[str] = mapped_column(String(64), unique=True)
    collector: Mapped[str] = mapped_column(String(128))
    cluster: Mapped[str] = mapped_column(String(128))
    slurm_job_id: Mapped[int | None] = mapped_column(BigId)
    attempt_label: Mapped[int | None] = mapped_column(Integer)
    node: Mapped[str | None] = mapped_column(String(256))
    filename: Mapped[str | None] = mapped_column(Text)
    log_source_id: Mapped[int | None] = mapped_column(ForeignKey("log_sources.id", ondelete="SET NULL"))
    # arrival (service clock) of the latest push with lines, and the newest source time among its lines
    last_push_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    latest_line_time: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    lines: Mapped[int] = mapped_column(BigId, default=0)
    replayed: Mapped[int] = mapped_column(BigId, default=0)  # lines pushed again (same timestamp and text)
    # lines whose time was only the collector's observation, none at all, or rewritten to ingestion time
    observed_time: Mapped[int] = mapped_column(BigId, default=0)
    no_timestamp: Mapped[int] = mapped_column(BigId, default=0)
    rewritten_time: Mapped[int] = mapped_column(BigId, default=0)
    dropped: Mapped[int] = mapped_column(BigId, default=0)  # unenrolled job, push off for the cluster
    drop_reason: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class PushedLine(Base):
    """A pushed line's identity (stream, source time, text) and its text for the log view; kept for the retention."""

    __tablename__ = "pushed_lines"
    __table_args__ = (Index(None, "stream_id", "line_number"), Index(None, "received_at"))

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    line_key: Mapped[str] = mapped_column(String(32), unique=True)
    stream_id: Mapped[int] = mapped_column(ForeignKey("push_streams.id", ondelete="CASCADE"))
    time_ns: Mapped[int] = mapped_column(BigId)  # 0: the line had no time
    time_kind: Mapped[str] = mapped_column(String(16))  # source | observed | line | rewritten | none
    line: Mapped[str] = mapped_column(Text)
    # the stream's line number of the entry's first line (an entry may hold several); None: pushed before 0017
    line_number: Mapped[int | None] = mapped_column(BigId)
    received_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
