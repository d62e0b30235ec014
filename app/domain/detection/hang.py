"""Hang-detector arithmetic: which phase a file is in, its threshold, and when silence is an anomaly."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from app.domain.admission.policy import AnomalyDetectionConfig
from app.domain.detection.signatures import PRETRAINING, TRAININGLOOP, ProgressMarker

# The policy's defaults (app.domain.admission.policy is their one home), as the detector's seconds.
DEFAULT_PRETRAINING_THRESHOLD = float(AnomalyDetectionConfig().log_based_timeout_threshold_pretraining)
DEFAULT_TRAININGLOOP_THRESHOLD = float(AnomalyDetectionConfig().log_based_timeout_threshold_trainingloop)


@dataclass(frozen=True)
class HangThresholds:
    """Seconds of silence allowed per phase (from the effective APS policy)."""

    pretraining: float = DEFAULT_PRETRAINING_THRESHOLD
    trainingloop: float = DEFAULT_TRAININGLOOP_THRESHOLD

    @classmethod
    def of(cls, config: AnomalyDetectionConfig) -> HangThresholds:
        """The job's thresholds from its effective policy."""
        return cls(
            pretraining=float(config.log_based_timeout_threshold_pretraining),
            trainingloop=float(config.log_based_timeout_threshold_trainingloop),
        )

    def for_phase(self, phase: str) -> float:
        return self.trainingloop if phase == TRAININGLOOP else self.pretraining


@dataclass(frozen=True)
class ProgressState:
    """What the detector knows about one tracked file: armed or not, its phase, the latest marker."""

    armed: bool = False
    phase: str | None = None
    marker_line: int | None = None
    marker_offset: int | None = None
    marker_at: datetime | None = None

    def observe(self, marker: ProgressMarker, *, line_number: int, offset: int, at: datetime | None) -> ProgressState:
        """The phase follows the latest marker: a pretraining marker after loop markers means a restart."""
        if self.marker_offset is not None and offset < self.marker_offset:
            return self  # older than what we know (re-delivery)
        return replace(
            self, armed=True, phase=marker.phase, marker_line=line_number, marker_offset=offset, marker_at=at
        )


def silence_exceeded(
    state: ProgressState, *, last_output_at: datetime | None, now: datetime, thresholds: HangThresholds
) -> bool:
    """True when an armed file has printed nothing (of any kind) for longer than its phase's threshold."""
    if not state.armed or state.phase is None:
        return False
    reference = last_output_at or state.marker_at
    if reference is None:
        return False
    return (now - reference).total_seconds() > thresholds.for_phase(state.phase)


@dataclass
class SilenceScan:
    """Offline replay for check-log: feed lines in order; remembers the largest gap and the first alarm."""

    thresholds: HangThresholds
    state: ProgressState = ProgressState()
    last_time: datetime | None = None
    last_line: int | None = None
    largest_gap: float = 0.0
    largest_gap_line: int | None = None
    largest_gap_phase: str | None = None
    first_alarm_line: int | None = None
    first_alarm_gap: float | None = None
    first_alarm_phase: str | None = None

    def feed(
        self, *, line_number: int, at: datetime | None, marker: ProgressMarker | None = None, offset: int = 0
    ) -> None:
        if at is not None and self.state.armed and self.last_time is not None:
            gap = (at - self.last_time).total_seconds()
            phase = self.state.phase or PRETRAINING
            if gap > self.largest_gap:
                self.largest_gap, self.largest_gap_line, self.largest_gap_phase = gap, line_number, phase
            if self.first_alarm_line is None and gap > self.thresholds.for_phase(phase):
                self.first_alarm_line, self.first_alarm_gap, self.first_alarm_phase = line_number, gap, phase
        if marker is not None:
            self.state = self.state.observe(marker, line_number=line_number, offset=offset, at=at)
        if at is not None:
            self.last_time, self.last_line = at, line_number
