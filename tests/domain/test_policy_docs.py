"""The documented policy table (docs/job-author-policy.md) names exactly EffectivePolicy's keys and defaults."""

from __future__ import annotations

import json
import re
from dataclasses import fields
from pathlib import Path
from typing import Any

from app.domain.admission.policy import AnomalyDetectionConfig, EffectivePolicy

DOC = Path(__file__).resolve().parents[2] / "docs" / "job-author-policy.md"
ROW = re.compile(r"^\| `([a-z_.]+)` \| (?:[^|\\]|\\\|)+ \| ([^|]+) \|", re.M)  # `\|` inside a cell is not a border


def _documented() -> dict[str, str]:
    return {key: default.strip() for key, default in ROW.findall(DOC.read_text())}


def _defaults() -> dict[str, Any]:
    values: dict[str, Any] = {}
    for f in fields(EffectivePolicy):
        if f.name in ("unknown_keys", "anomaly_detection_config"):
            continue
        values[f.name] = getattr(EffectivePolicy(), f.name)
    for f in fields(AnomalyDetectionConfig):
        if f.name != "unknown_keys":
            values[f"anomaly_detection_config.{f.name}"] = getattr(AnomalyDetectionConfig(), f.name)
    return values


def _shown(default: str) -> Any:
    """A documented default as a value: `960`, `"observe"`, `false`; "none: ..." and "**required**" are None."""
    literal = re.fullmatch(r"`(.+)`", default)
    if literal:
        return json.loads(literal.group(1))
    assert default.startswith(("none", "**required**")), default
    return None


def test_the_table_lists_every_key_and_nothing_else() -> None:
    assert set(_documented()) == set(_defaults())


def test_the_table_shows_each_default() -> None:
    documented = _documented()
    assert {key: _shown(documented[key]) for key in documented} == _defaults()


def test_the_rule_reads_a_changed_default(tmp_path: Path) -> None:
    changed = DOC.read_text().replace("| `960` |", "| `961` |")
    rows = {key: _shown(default.strip()) for key, default in ROW.findall(changed)}
    assert (
        rows["anomaly_detection_config.log_based_timeout_threshold_pretraining"]
        == 961
        != _defaults()["anomaly_detection_config.log_based_timeout_threshold_pretraining"]
    )
