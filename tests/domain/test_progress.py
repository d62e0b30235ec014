"""The hang detector's arithmetic: arming, phases, thresholds from the policy, and the offline replay."""

from __future__ import annotations

import datetime as dt

from app.domain.admission.policy import AnomalyDetectionConfig, EffectivePolicy
from app.domain.detection.hang import HangThresholds, ProgressState, SilenceScan, silence_exceeded
from app.domain.detection.signatures import PRETRAINING, TRAININGLOOP, ProgressMarker

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
LOOP = ProgressMarker(phase=TRAININGLOOP, rule="iteration")
START = ProgressMarker(phase=PRETRAINING, rule="start")


def test_default_thresholds_are_the_policys() -> None:
    config = EffectivePolicy().anomaly_detection_config
    assert HangThresholds() == HangThresholds.of(config)
    assert HangThresholds().for_phase(PRETRAINING) == config.log_based_timeout_threshold_pretraining
    tuned = HangThresholds.of(AnomalyDetectionConfig(log_based_timeout_threshold_trainingloop=5))
    assert tuned.for_phase(TRAININGLOOP) == 5.0 and tuned.pretraining == 960.0


def test_a_file_arms_at_its_first_marker_and_follows_the_latest() -> None:
    state = ProgressState()
    assert not silence_exceeded(state, last_output_at=None, now=T0, thresholds=HangThresholds())
    state = state.observe(LOOP, line_number=10, offset=100, at=T0)
    assert state.armed and state.phase == TRAININGLOOP
    assert state.observe(START, line_number=3, offset=50, at=T0) is state  # older: a re-delivery
    restarted = state.observe(START, line_number=20, offset=200, at=T0)
    assert restarted.phase == PRETRAINING


def test_silence_counts_from_the_last_output() -> None:
    state = ProgressState().observe(LOOP, line_number=1, offset=0, at=T0)
    limits = HangThresholds(pretraining=100, trainingloop=10)
    assert not silence_exceeded(state, last_output_at=T0, now=T0 + dt.timedelta(seconds=10), thresholds=limits)
    assert silence_exceeded(state, last_output_at=T0, now=T0 + dt.timedelta(seconds=11), thresholds=limits)
    later = T0 + dt.timedelta(seconds=8)
    assert not silence_exceeded(state, last_output_at=later, now=T0 + dt.timedelta(seconds=11), thresholds=limits)


def test_the_replay_finds_the_first_alarm_and_the_largest_gap() -> None:
    scan = SilenceScan(HangThresholds(pretraining=100, trainingloop=10))
    scan.feed(line_number=1, at=T0)  # not armed yet: no gap counts
    scan.feed(line_number=2, at=T0 + dt.timedelta(seconds=500), marker=LOOP, offset=10)
    scan.feed(line_number=3, at=T0 + dt.timedelta(seconds=505))
    scan.feed(line_number=4, at=T0 + dt.timedelta(seconds=530))
    assert (scan.first_alarm_line, scan.first_alarm_phase) == (4, TRAININGLOOP)
    assert scan.largest_gap == 25.0 and scan.largest_gap_line == 4
