"""The demo's narration: one DETECTED line per cause, a fresh database per run, help that names its settings."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from app.audit.models import AuditEvent
from app.demo import Narrator, fresh_database, lab_down_command

ROOT = Path(__file__).resolve().parents[1]


def _event(event_id: int, event_type: str, message: str, *, attempt: int = 0, **payload: object) -> AuditEvent:
    return AuditEvent(
        id=event_id,
        event_type=event_type,
        component="watcher",
        level="ERROR",
        message=message,
        slurm_job_id=215,
        attempt_index=attempt,
        payload=payload,
    )


def test_one_detected_line_per_cause_names_the_root_cause_and_counts_follow_ons() -> None:
    out = io.StringIO()
    narrator = Narrator(out, job_ids={215})
    narrator.event(_event(1, "anomaly.detected", "CRASH PYTHON_EXCEPTION: RuntimeError", kind="CRASH", anomalyId=10))
    narrator.event(_event(2, "anomaly.detected", "CRASH NCCL_ERROR: NCCL_ERROR on node3", kind="CRASH", anomalyId=11))
    assert out.getvalue() == ""  # held until the Advice says which one is the cause
    narrator.event(_event(3, "advice.created", "Advice 3 created: RESTART excluding node3"), cited=11)
    narrator.event(_event(4, "anomaly.detected", "CRASH TORCHRUN: ChildFailedError", kind="CRASH", anomalyId=12))
    lines = out.getvalue().splitlines()
    detected = [line for line in lines if "DETECTED" in line]
    assert len(detected) == 1, lines
    assert "NCCL_ERROR on node3 (+1 follow-on line)" in detected[0]
    assert "ADVICE" in lines[1] and "ChildFailedError" not in out.getvalue()


def test_an_anomaly_without_advice_is_told_after_a_while_and_at_the_end() -> None:
    out = io.StringIO()
    narrator = Narrator(out, job_ids={215})
    narrator.event(_event(1, "anomaly.detected", "NO_PROGRESS: no output for 16 s", attempt=1, kind="NO_PROGRESS"))
    narrator.flush(older_than=narrator.HOLD_SECONDS)
    assert out.getvalue() == ""
    narrator.flush()
    assert "DETECTED" in out.getvalue() and "no output for 16 s" in out.getvalue()
    quiet = io.StringIO()
    other = Narrator(quiet, job_ids={1})  # the demo's own jobs only
    other.event(_event(3, "anomaly.detected", "another job's line", kind="CRASH"))
    other.flush()
    assert quiet.getvalue() == ""


def test_each_run_starts_with_a_fresh_database_unless_kept(tmp_path: Path) -> None:
    (tmp_path / "recovery.db").write_bytes(b"old")
    (tmp_path / "recovery.db-wal").write_bytes(b"old")
    assert fresh_database(str(tmp_path)) is True
    assert not (tmp_path / "recovery.db").exists() and not (tmp_path / "recovery.db-wal").exists()
    assert fresh_database(str(tmp_path)) is False


def test_help_names_bind_private_lab_keep_db_and_how_to_stop_the_lab() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "app.cli", "demo", "--help"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    for words in ("RECOVERY_BIND", "RECOVERY_LAB_DIR", "RECOVERY_LAB_PORT_OFFSET", "--keep-db", "recovery lab down"):
        assert words in shown, words
    assert lab_down_command("/tmp/lab-x") == "recovery lab down --lab-dir /tmp/lab-x"
    assert lab_down_command(None) == "recovery lab down"
