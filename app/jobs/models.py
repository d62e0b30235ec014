"""ORM models for workflows, jobs (one Slurm job incarnation), attempts and parsed policies."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, Boolean, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.infra.db import Base, BigId, UTCDateTime, utcnow


class Workflow(Base):
    """A group of jobs sharing a workflow_id on one cluster; grouping does not imply order."""

    __tablename__ = "workflows"
    __table_args__ = (
        UniqueConstraint("cluster", "workflow_key"),
        Index(None, "updated_at", "id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    cluster: Mapped[str] = mapped_column(String(128))
    environment: Mapped[str] = mapped_column(String(128))
    workflow_key: Mapped[str] = mapped_column(String(256))
    # Denormalised from the newest attempt so that list pages filter and sort without joins.
    latest_state: Mapped[str | None] = mapped_column(String(32))
    latest_job_name: Mapped[str | None] = mapped_column(String(256))
    attempt_count: Mapped[int] = mapped_column(Integer, default=0)
    failed_attempt_count: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class Job(Base):
    """One Slurm job (a job id incarnation: job-id reuse starts a new row) and its enrolment."""

    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("cluster", "slurm_job_id", "incarnation"),
        Index(None, "workflow_id", "id"),
        Index(None, "slurm_job_id"),
        Index(None, "array_job_id", "array_task_id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    cluster: Mapped[str] = mapped_column(String(128))
    slurm_job_id: Mapped[int] = mapped_column(BigId)
    incarnation: Mapped[int] = mapped_column(Integer, default=0)
    # One task of a job array: the array's id and the task's index (both None for other jobs;
    # array_task_id None with array_job_id set while the record still stands for unsplit pending tasks).
    array_job_id: Mapped[int | None] = mapped_column(BigId)
    array_task_id: Mapped[int | None] = mapped_column(Integer)
    workflow_id: Mapped[int | None] = mapped_column(ForeignKey("workflows.id", ondelete="CASCADE"))
    name: Mapped[str | None] = mapped_column(String(256))
    user: Mapped[str | None] = mapped_column(String(128))
    # Slurm's numeric UserId/GroupId of the job (null: recorded before 0012, or Slurm did not say): the
    # collector and the log view open the job's files with this user's rights only (app/jobfiles/safe_open.py).
    user_id: Mapped[int | None] = mapped_column(BigId)
    group_id: Mapped[int | None] = mapped_column(BigId)
    partition: Mapped[str | None] = mapped_column(String(256))
    submit_time: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    comment: Mapped[str | None] = mapped_column(Text)
    # ENROLLED, NOT_ENROLLED (policy invalid), ENVIRONMENT_MISMATCH, UNMANAGED_PARTITION
    enrolment: Mapped[str] = mapped_column(String(32))
    enrolment_reason: Mapped[str | None] = mapped_column(Text)
    requested_mode: Mapped[str | None] = mapped_column(String(16))
    # The mode resolved at registration (a record of that time); the mode NOW is admission/mode.py effective_mode().
    registered_mode: Mapped[str] = mapped_column(String(16), default="observe")
    mode_reason: Mapped[str | None] = mapped_column(Text)
    requeue_eligible: Mapped[bool | None] = mapped_column(Boolean)
    # The policy's log_file_paths_shared_across_attempts: events are then attributed by label/time.
    shared_log_paths: Mapped[bool] = mapped_column(Boolean, default=False)
    state: Mapped[str | None] = mapped_column(String(32))
    restart_count: Mapped[int] = mapped_column(Integer, default=0)
    retired_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    last_seen_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class Policy(Base):
    """The job's APS policy as parsed: effective values with defaults, warnings and errors."""

    __tablename__ = "policies"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), unique=True)
    wrapper: Mapped[str | None] = mapped_column(String(16))
    valid: Mapped[bool] = mapped_column(Boolean)
    effective: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    warnings: Mapped[list[Any]] = mapped_column(JSON, default=list)
    errors: Mapped[list[Any]] = mapped_column(JSON, default=list)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class Attempt(Base):
    """One execution of a job; attempt_index is Slurm's restart count when it started."""

    __tablename__ = "attempts"
    __table_args__ = (
        UniqueConstraint("job_id", "attempt_index"),
        Index(None, "cluster", "slurm_job_id", "attempt_index"),
        Index(None, "updated_at", "id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(36), unique=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    workflow_id: Mapped[int | None] = mapped_column(ForeignKey("workflows.id", ondelete="CASCADE"))
    cluster: Mapped[str] = mapped_column(String(128))
    slurm_job_id: Mapped[int] = mapped_column(BigId)
    attempt_index: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(32))
    state_reason: Mapped[str | None] = mapped_column(Text)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    exit_signal: Mapped[int | None] = mapped_column(Integer)
    nodes: Mapped[list[str]] = mapped_column(JSON, default=list)
    stdout_path: Mapped[str | None] = mapped_column(Text)
    stderr_path: Mapped[str | None] = mapped_column(Text)
    requeue_eligible: Mapped[bool | None] = mapped_column(Boolean)
    held: Mapped[bool] = mapped_column(Boolean, default=False)
    excluded_nodes: Mapped[list[str]] = mapped_column(JSON, default=list)
    # Slurm's SLURM_TASKS_PER_NODE for the attempt ("4(x2)"), when squeue reports it: maps ranks to nodes.
    tasks_per_node: Mapped[str | None] = mapped_column(String(256))
    start_time: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    end_time: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    ended_reason: Mapped[str | None] = mapped_column(Text)
    # When this installation first saw the attempt live (pending or running); null: first seen ended.
    first_seen_running_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    # Set when its end was not observed by this installation: history only, never acting Advice.
    adopted_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    adopted_reason: Mapped[str | None] = mapped_column(Text)
    # The first progress marker the collector read for this attempt (goodput: restart -> first progress), 0011.
    first_progress_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
