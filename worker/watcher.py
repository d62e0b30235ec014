"""Watcher: the no-output (hang) detector of SPEC §5, run over the collector's log sources.

A file is tracked once a configured progress marker matched in it (the collector records the
phase). When its phase's threshold of silence expires, the attempt must be RUNNING and the file
among its log paths; after the query delay, any output within the threshold window suppresses the
anomaly, otherwise a NO_PROGRESS anomaly is recorded once per attempt, file and silence episode.
The timer is stored on the log source (`hang_episode`, `hang_delay_started_at`, `hang_checked_at`),
and the silence is measured from the stored last output, so a restarted worker neither restarts the
query delay nor re-checks an episode it already checked.
Crash lines and throughput samples are turned into anomalies as the collector reads them
(app/evidence/service.py, component `watcher`); a crash line printed after Recovery sent requeue-hold or
cancel is kept apart (AFTER_RECOVERY_ACTED), and an attempt Recovery acted on gets no NO_PROGRESS: both
are the ending Recovery caused. Detectors never call Slurm.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.domain.admission.policy import EffectivePolicy
from app.domain.detection.hang import HangThresholds, ProgressState, silence_exceeded
from app.domain.detection.signatures import TRAININGLOOP
from app.evidence import queries as evidence_queries
from app.evidence import service as evidence
from app.infra.context import AppContext
from app.infra.db import Session, utcnow
from app.ingest import queries as ingest_queries
from app.jobs import queries as job_queries
from worker.service import Service

if TYPE_CHECKING:  # row types for annotations only: the SQL lives in the areas' queries
    from app.evidence.models import LogSource
    from app.jobs.models import Attempt

log = logging.getLogger("recovery.watcher")

RUNNING = "RUNNING"
PUSHED = "push://"  # log sources of pushed streams (app/ingest/service.py)


@dataclass
class Expiry:
    """A silence episode whose timer expired: when to look for recent output, and whether that is done."""

    check_at: dt.datetime
    done: bool = False


@dataclass(frozen=True)
class HangPolicy:
    """The job's effective switches for the no-output detector."""

    enabled: bool
    thresholds: HangThresholds

    @classmethod
    def of(cls, policy: EffectivePolicy) -> HangPolicy:
        config = policy.anomaly_detection_config
        return cls(enabled=config.log_based_timeout_enabled, thresholds=HangThresholds.of(config))


class Watcher(Service):
    """Runs the no-output detector every tick over armed log sources of running attempts."""

    name = "watcher"

    def __init__(self, ctx: AppContext, *, clock: Callable[[], dt.datetime] = utcnow, interval: float = 1.0) -> None:
        super().__init__(interval=interval)
        self.ctx = ctx
        self.settings = ctx.settings
        self.clock = clock
        self.on_anomaly: list[Callable[[], None]] = []
        self._expired: dict[tuple[int, int, str], Expiry] = {}
        self._policies: dict[int, HangPolicy] = {}

    async def tick(self) -> None:
        now = self.clock()
        recorded = 0
        async with self.ctx.sessions() as session, session.begin():
            candidates = await evidence_queries.armed_sources(session)
            await self._load_policies(session, {row.job_id for row, _ in candidates if row.job_id is not None})
            live_keys: set[tuple[int, int, str]] = set()
            for row, attempt in candidates:
                key = self._episode(row, attempt)
                live_keys.add(key)
                if await self._check(session, row, attempt, key, now):
                    recorded += 1
            for key in [k for k in self._expired if k not in live_keys]:
                del self._expired[key]  # new output started a new episode, or the file is no longer tracked
        if recorded:
            for callback in self.on_anomaly:
                try:
                    callback()
                except Exception:
                    log.exception("anomaly listener failed")

    async def _load_policies(self, session: Session, job_ids: set[int]) -> None:
        missing = sorted(job_ids - set(self._policies))
        if missing:
            for policy in await job_queries.policies_of_jobs(session, job_ids=missing):
                self._policies[policy.job_id] = HangPolicy.of(EffectivePolicy.from_dict(policy.effective))

    @staticmethod
    def _episode(row: LogSource, attempt: Attempt) -> tuple[int, int, str]:
        """A silence episode: this file, this attempt, silent since its last output."""
        since = row.last_output_at or row.progress_at
        return (row.id, attempt.id, since.isoformat() if since else "")

    async def _check(
        self, session: Session, row: LogSource, attempt: Attempt, key: tuple[int, int, str], now: dt.datetime
    ) -> bool:
        policy = self._policies.get(row.job_id or -1) or HangPolicy.of(EffectivePolicy())
        if not policy.enabled:
            return False  # log_based_timeout_enabled: false suppresses only this detector
        state = ProgressState(armed=True, phase=row.progress_phase, marker_at=row.progress_at)
        if not silence_exceeded(state, last_output_at=row.last_output_at, now=now, thresholds=policy.thresholds):
            return False
        delay = dt.timedelta(seconds=self.settings.hang_query_delay)
        expiry = self._expired.get(key) or _stored_expiry(row, key, delay)
        if expiry is None:
            # The timer expired: the attempt must be running and the file among its log paths.
            if (
                attempt.state != RUNNING
                or not self._armed_for(row, attempt)
                or not await self._among_log_paths(session, row, attempt)
            ):
                self._expired[key] = Expiry(check_at=now, done=True)
                return False
            self._expired[key] = Expiry(check_at=now + delay)
            # Stored with the tick's transaction: a restarted watcher keeps this episode's query delay.
            await evidence.start_hang_delay(session, source=row, episode=key[2], at=now)
            return False
        self._expired[key] = expiry
        if expiry.done or now < expiry.check_at:
            return False
        expiry.done = True
        threshold = policy.thresholds.for_phase(row.progress_phase or "")
        window_start = now - dt.timedelta(seconds=threshold)
        await session.refresh(row)  # the collector may have read new output meanwhile
        delay_started = row.hang_delay_started_at if row.hang_episode == key[2] else None
        await evidence.note_hang_check(session, source=row, episode=key[2], at=now)
        last_output = row.last_output_at
        mtime = await asyncio.to_thread(_mtime, row.path)
        if (last_output is not None and last_output > window_start) or (mtime is not None and mtime > window_start):
            return False  # any output in the file within the threshold window suppresses the anomaly
        if await evidence.recovery_acted_at(session, attempt_id=attempt.id) is not None:
            return False  # Recovery requeue-held or cancelled it: the silence is Recovery's doing, not a hang
        pipeline = await _pushed_pipeline(session, row, window_start)
        if pipeline is not None and not pipeline["alive"]:
            # A pushed stream's silence proves nothing while its collector and node are silent too: the
            # pipeline (agent, network) may be what stopped. No hang without evidence it still carries lines.
            log.info("no NO_PROGRESS for %s: its collector/node pushed nothing else either", row.path)
            return False
        silent_since = last_output or row.progress_at
        silent = (now - silent_since).total_seconds() if silent_since else None
        phase = row.progress_phase or ""
        anomaly = await evidence.record_anomaly(
            session,
            attempt=attempt,
            kind=evidence.NO_PROGRESS,
            category="NO_OUTPUT_" + phase.upper(),
            detector="noprogress",
            event_key=evidence.derived_key("noprogress", attempt.id, row.id, key[2]),
            message=f"no output in {os.path.basename(row.path)} for {silent:.0f} s ({phase} threshold "
            f"{threshold:.0f} s)"
            if silent is not None
            else f"no output in {os.path.basename(row.path)} ({phase} threshold {threshold:.0f} s)",
            log_path=row.path,
            line_number=row.progress_line_number,
            line=row.progress_line,
            source_time=row.progress_at,
            details={
                "phase": phase,
                "thresholdSeconds": threshold,
                "queryDelaySeconds": self.settings.hang_query_delay,
                "queryDelayStartedAt": delay_started.isoformat() if delay_started else None,
                "checkedAt": now.isoformat(),
                "lastOutputAt": last_output.isoformat() if last_output else None,
                "silentSeconds": silent,
                "fileModifiedAt": mtime.isoformat() if mtime else None,
                "linesRead": row.line_number,
                "trainingLoop": phase == TRAININGLOOP,
                **({"pipeline": pipeline} if pipeline is not None else {}),
            },
        )
        return anomaly is not None

    @staticmethod
    def _armed_for(row: LogSource, attempt: Attempt) -> bool:
        """The marker that armed the file is this attempt's (a shared file armed by attempt 0 does not arm
        attempt 1)."""
        if row.progress_attempt_id is not None:
            return row.progress_attempt_id == attempt.id
        return attempt.start_time is not None and row.progress_at is not None and row.progress_at >= attempt.start_time

    async def _among_log_paths(self, session: Session, row: LogSource, attempt: Attempt) -> bool:
        """The tracked file is one of the attempt's log paths (StdOut/StdErr, or a log-directory file of its job)."""
        if row.attempt_id is not None and row.attempt_id != attempt.id:
            return False
        if row.job_id != attempt.job_id:
            return False
        if row.path.startswith(PUSHED):
            return True  # a pushed stream is the job's by its labels (the same job checked above)
        return row.path in {attempt.stdout_path, attempt.stderr_path} or _in_log_dirs(row.path, self.settings.log_dirs)


async def _pushed_pipeline(session: Session, row: LogSource, since: dt.datetime) -> dict[str, object] | None:
    """For a pushed stream: is its pipeline alive (other streams of its collector or node arrived since `since`)?"""
    if not row.path.startswith(PUSHED):
        return None
    stream = await ingest_queries.stream_of_source(session, log_source_id=row.id)
    if stream is None:
        return {"alive": False, "reason": "stream unknown"}
    alive = await ingest_queries.pipeline_liveness(session, stream=stream, since=since)
    return {
        "alive": alive.alive,
        "collector": alive.collector,
        "node": alive.node,
        "otherStreamsArriving": alive.other_streams,
        "latestOtherPushAt": alive.latest_other_push_at.isoformat() if alive.latest_other_push_at else None,
        "evidence": "other streams of this collector or node still arrive: the pipeline is alive, the job is silent"
        if alive.alive
        else "nothing else arrives from this collector or node: the pipeline may be what went quiet",
    }


def _stored_expiry(row: LogSource, key: tuple[int, int, str], delay: dt.timedelta) -> Expiry | None:
    """The timer a previous watcher stored for this silence episode (None: not expired yet, or another episode)."""
    if row.hang_episode != key[2] or row.hang_delay_started_at is None:
        return None
    return Expiry(check_at=row.hang_delay_started_at + delay, done=row.hang_checked_at is not None)


def _in_log_dirs(path: str, log_dirs: tuple[str, ...]) -> bool:
    parent = os.path.abspath(os.path.dirname(path))
    return any(parent == os.path.abspath(d) for d in log_dirs)


def _mtime(path: str) -> dt.datetime | None:
    try:
        return dt.datetime.fromtimestamp(os.lstat(path).st_mtime, dt.UTC)  # the job controls the path: no symlinks
    except OSError:
        return None
