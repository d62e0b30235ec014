"""`recovery check-log FILE`: show a job author what the detectors would make of a log file."""

from __future__ import annotations

import json
import re
import statistics
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

from app.authoring import log_verdict as diagnosis
from app.authoring.policy_check import comment_from_input
from app.domain.admission.policy import parse_comment
from app.domain.admission.sbatch import parse_script
from app.domain.detection import line_nodes
from app.domain.detection.hang import HangThresholds, SilenceScan
from app.domain.detection.line_facts import decode_line, parse_timestamp
from app.domain.detection.rules_builtin import default_ruleset
from app.domain.detection.rules_file import SignatureConfigError, parse_signature_config
from app.domain.detection.signatures import (
    NODE_FAIL,
    CheckpointEvent,
    CrashSignature,
    ProgressMarker,
    RuleSet,
    ThroughputSample,
)
from app.infra.config import Settings
from app.jobfiles.reader import LINE_CAP, FilePosition, LogTailer
from app.slurm.names import expand_hostlist

EXIT_OK = 0
EXIT_USAGE = 2
_SHOWN = 50


@dataclass
class _Report:
    crashes: list[dict[str, Any]] = field(default_factory=list)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    progress: dict[str, dict[str, Any]] = field(default_factory=dict)
    first_marker: dict[str, Any] | None = None
    markers: dict[int, ProgressMarker] = field(default_factory=dict)  # line -> marker that arms
    throughput: dict[str, list[float]] = field(default_factory=dict)


def load_ruleset(settings: Settings) -> RuleSet:
    """Defaults, or the operator's signatures file applied on top of them."""
    if not settings.signatures_file:
        return default_ruleset()
    return parse_signature_config(Path(settings.signatures_file).read_text(encoding="utf-8"))


def _collect(path: str, ruleset: RuleSet) -> _Report:
    report = _Report()
    tailer = LogTailer(ruleset, all_progress=True, all_throughput=True, max_bytes=16 * 1024 * 1024, traceback_wait=0.0)
    position = FilePosition(path=path)
    size = Path(path).stat().st_size
    try:
        while True:
            before = position.offset
            result = tailer.read(position)
            position = result.position
            for event in result.events:
                where = {"line": event.line_number, "text": event.text[:300]}
                if isinstance(event.signal, CrashSignature):
                    s = event.signal
                    report.crashes.append(
                        {
                            **where,
                            "category": s.category,
                            "rule": s.rule,
                            "nodes": list(s.nodes),
                            "rank": s.rank,
                            "xid": s.xid,
                            "detail": s.detail,
                            "source_time": event.source_time.isoformat() if event.source_time else None,
                        }
                    )
                elif isinstance(event.signal, CheckpointEvent):
                    c = event.signal
                    saved: dict[str, Any] = {
                        **where,
                        "kind": c.kind,
                        "framework": c.framework,
                        "iteration": c.iteration,
                        "path": c.path,
                    }
                    previous = report.checkpoints[-1] if report.checkpoints else None
                    if c.iteration is None and previous and _same_save(previous, saved):
                        # "Finished saving the checkpoint" names no step: the "Saving ... step N" line before it did.
                        saved["iteration"] = previous["iteration"]
                    report.checkpoints.append(saved)
            for event in result.progress:
                marker = event.signal
                assert isinstance(marker, ProgressMarker)
                if marker.arms:
                    report.markers.setdefault(event.line_number, marker)
                if report.first_marker is None and marker.arms:
                    report.first_marker = {
                        "line": event.line_number,
                        "phase": marker.phase,
                        "rule": marker.rule,
                        "text": event.text[:300],
                    }
                entry = report.progress.setdefault(
                    marker.phase,
                    {"count": 0, "first_line": event.line_number, "last_line": event.line_number, "rules": []},
                )
                entry["count"] += 1
                entry["last_line"] = event.line_number
                if marker.rule not in entry["rules"]:
                    entry["rules"].append(marker.rule)
            for event in result.throughput:
                assert isinstance(event.signal, ThroughputSample)
                for metric, value in event.signal.values.items():
                    report.throughput.setdefault(metric, []).append(value)
            # A traceback cut off at the end of the file holds the read back once; read on from it.
            if not result.more and (position.offset >= size or position.offset == before):
                break
    finally:
        tailer.close()
    return report


_BLOCK_FIELD = re.compile(r"^\s*(?:exitcode|traceback)\s*:")


def _ranks_from_launcher_blocks(path: str, crashes: list[dict[str, Any]]) -> None:
    """torchrun's failure block puts `host : name` and `rank : N` a few lines above its `exitcode :` /
    `traceback :` line: they name the failed process. Lines naming its PID or rank (`process_lines`) say its
    node once the allocation is known (the collector does the same, worker/collector/reading.py)."""
    wanted = [c for c in crashes if _BLOCK_FIELD.match(c["text"]) or c["rank"] is not None or _nodeless_loss(c)]
    if not wanted:
        return
    with open(path, "rb") as handle:
        lines = [decode_line(raw[:LINE_CAP].rstrip(b"\n")) for raw in handle]
    for crash in wanted:
        _block_facts(crash, lines)
        if _nodeless_loss(crash):
            host = line_nodes.actor_block_node(lines[max(0, crash["line"] - 9) : crash["line"] - 1])
            if host is not None:
                crash["nodes"] = [host]
        pid = line_nodes.process_id(crash["text"]) if _BLOCK_FIELD.match(crash["text"]) else None
        before = lines[: crash["line"] - 1]
        context = line_nodes.lines_naming_pid(before, pid) if pid is not None else []
        if crash["rank"] is not None:
            context += line_nodes.lines_naming_rank(before, crash["rank"])
        if context:
            crash["process_lines"] = context


def _nodeless_loss(crash: dict[str, Any]) -> bool:
    """A node-loss line that names no node (Ray's "its node has died" closes a block whose `ip:` names it)."""
    return crash["category"] == NODE_FAIL and not crash["nodes"]


def _block_facts(crash: dict[str, Any], lines: list[str]) -> None:
    """The rank and host of torchrun's failure block above a block line."""
    if not _BLOCK_FIELD.match(crash["text"]):
        return
    rank, host = line_nodes.launcher_block_facts(lines[max(0, crash["line"] - 7) : crash["line"] - 1])
    if line_nodes.under_root_cause_head(lines[max(0, crash["line"] - 10) : crash["line"] - 1]):
        crash["first_observed"] = True
    if crash["rank"] is None:
        crash["rank"] = rank
    if host is not None and host not in crash["nodes"]:
        crash["nodes"] = [host, *crash["nodes"]]


def _same_save(previous: dict[str, Any], entry: dict[str, Any]) -> bool:
    """Two lines about one checkpoint: same kind and framework, a few lines apart, only the first with a step."""
    return (
        previous["iteration"] is not None
        and (previous["kind"], previous["framework"]) == (entry["kind"], entry["framework"])
        and 0 < entry["line"] - previous["line"] <= 10
    )


def _silence(path: str, markers: dict[int, ProgressMarker], thresholds: HangThresholds) -> SilenceScan:
    """Replay source timestamps line by line: where would the no-output detector have fired?

    `markers` are the reader's arming markers by line (configured rules, and counters that advanced).
    """
    scan = SilenceScan(thresholds)
    now = datetime.now(UTC)
    offset = 0
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            text = decode_line(raw[:LINE_CAP].rstrip(b"\n"))
            marker = markers.get(number)
            scan.feed(
                line_number=number,
                at=parse_timestamp(text, now=now, default_tz=UTC),
                marker=marker,
                offset=offset,
            )
            offset += len(raw)
    return scan


def _end_of_file(scan: SilenceScan, thresholds: HangThresholds, *, now: datetime) -> dict[str, Any] | None:
    """The silence after the last timestamped line counts too: when would a still-running job's hang be raised?"""
    if not scan.state.armed or scan.last_time is None:
        return None
    phase = scan.state.phase or "pretraining"
    threshold = thresholds.for_phase(phase)
    silent = max((now - scan.last_time).total_seconds(), 0.0)
    return {
        "last_line": scan.last_line,
        "last_time": scan.last_time.isoformat(),
        "phase": phase,
        "threshold_seconds": threshold,
        "would_raise_at": (scan.last_time + timedelta(seconds=threshold)).isoformat(),
        "silent_seconds_until_now": round(silent, 3),
        "would_have_raised_by_now": silent > threshold,
    }


def build_report(
    path: str,
    ruleset: RuleSet,
    thresholds: HangThresholds | None = None,
    *,
    settings: Settings | None = None,
    attempt_nodes: tuple[str, ...] = (),
    tasks_per_node: str | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Everything check-log prints, as one JSON-ready dict."""
    report = _collect(path, ruleset)
    _ranks_from_launcher_blocks(path, report.crashes)
    thresholds = thresholds or HangThresholds()
    silence = _silence(path, report.markers, thresholds)
    now = now or datetime.now(UTC)
    throughput = {
        metric: {"count": len(values), "min": min(values), "median": statistics.median(values), "max": max(values)}
        for metric, values in sorted(report.throughput.items())
    }
    cause = diagnosis.diagnose(report.crashes, attempt_nodes=attempt_nodes, tasks_per_node=tasks_per_node)
    checkpoint = report.checkpoints[-1] if report.checkpoints else None
    return {
        "file": path,
        **cause,
        "checkpoint_iteration": checkpoint["iteration"] if checkpoint else None,
        "advisor": diagnosis.advisor_verdict(cause, report.checkpoints, settings),
        "crash_signatures": report.crashes,
        "checkpoints": report.checkpoints,
        "progress": report.progress,
        "hang_detector": {
            "armed": report.first_marker is not None,
            "first_marker": report.first_marker,
            "thresholds_seconds": {"pretraining": thresholds.pretraining, "trainingloop": thresholds.trainingloop},
            "largest_silent_gap_seconds": silence.largest_gap if silence.state.armed else None,
            "largest_silent_gap_line": silence.largest_gap_line,
            "largest_silent_gap_phase": silence.largest_gap_phase,
            "would_raise_no_progress_at_line": silence.first_alarm_line,
            "no_progress_gap_seconds": silence.first_alarm_gap,
            "no_progress_phase": silence.first_alarm_phase,
            "end_of_file": _end_of_file(silence, thresholds, now=now),
        },
        "throughput": throughput,
    }


def _print_human(data: dict[str, Any], out: TextIO) -> None:
    w = out.write
    w(f"{data['file']}\n\n")
    diagnosis.print_verdict(data, out)
    crashes = data["crash_signatures"]
    w(f"Crash signatures: {len(crashes)}\n")
    for c in crashes[:_SHOWN]:
        extra = "".join(f" {k}={c[k]}" for k in ("nodes", "rank", "xid") if c[k] not in (None, []))
        w(f"  line {c['line']}: {c['category']} ({c['rule']}){extra}\n    {c['text']}\n")
        if c["detail"] and c["detail"] != c["text"].strip():
            w(f"    -> {c['detail']}\n")
    if len(crashes) > _SHOWN:
        w(f"  ... {len(crashes) - _SHOWN} more\n")
    ckpts = data["checkpoints"]
    w(f"\nCheckpoint events: {len(ckpts)}\n")
    for c in ckpts[:_SHOWN]:
        w(f"  line {c['line']}: {c['kind']} [{c['framework']}] iteration={c['iteration']} path={c['path']}\n")
    if len(ckpts) > _SHOWN:
        w(f"  ... {len(ckpts) - _SHOWN} more\n")
    w("\nProgress markers:\n")
    if not data["progress"]:
        w("  none\n")
    for phase, entry in data["progress"].items():
        w(
            f"  {phase}: {entry['count']} lines (first line {entry['first_line']}, last line "
            f"{entry['last_line']}; rules {', '.join(entry['rules'])})\n"
        )
    hang = data["hang_detector"]
    thresholds = hang["thresholds_seconds"]
    w("\nHang detector (no output):\n")
    if not hang["armed"]:
        w(
            "  would NOT arm: no configured progress marker and no step counter seen advancing in this log "
            "(a generic 'training started' line or a single progress line does not count)\n"
        )
    else:
        first = hang["first_marker"]
        w(f"  arms at line {first['line']} in phase {first['phase']} ({first['rule']}): {first['text']}\n")
        w(
            f"  thresholds: pretraining {thresholds['pretraining']:g} s, trainingloop {thresholds['trainingloop']:g} s"
            f" (from {hang.get('thresholds_from', 'the policy defaults')})\n"
        )
        gap = hang["largest_silent_gap_seconds"]
        if gap:
            w(
                f"  largest silent gap after arming: {gap:g} s before line "
                f"{hang['largest_silent_gap_line']} ({hang['largest_silent_gap_phase']})\n"
            )
        else:
            w("  no timestamped gap after arming\n")
        if hang["would_raise_no_progress_at_line"] is not None:
            w(
                f"  this log would have raised NO_PROGRESS at line {hang['would_raise_no_progress_at_line']} "
                f"({hang['no_progress_gap_seconds']:g} s silent in {hang['no_progress_phase']})\n"
            )
        else:
            w("  no silence long enough to raise NO_PROGRESS between its lines\n")
        end = hang.get("end_of_file")
        if end and data["crash_signatures"]:
            w(f"  the log ends at line {end['last_line']} after a crash, so its end is not read as a hang\n")
        elif end:
            w(
                f"  the log ends at line {end['last_line']} ({end['last_time']}, {end['phase']}): the silence after "
                f"it counts too. A job still running with no more output gets NO_PROGRESS at {end['would_raise_at']} "
                f"({end['threshold_seconds']:g} s after its last line)"
            )
            if end["would_have_raised_by_now"]:
                w(f"; this file has been silent {end['silent_seconds_until_now']:g} s, so it would have been raised")
            w(".\n")
    w("\nThroughput:\n")
    if not data["throughput"]:
        w("  none\n")
    for metric, s in data["throughput"].items():
        w(f"  {metric}: {s['count']} samples, min {s['min']:g}, median {s['median']:g}, max {s['max']:g}\n")


def job_thresholds(*, policy: str | None = None, script: str | None = None) -> tuple[HangThresholds, str]:
    """The hang thresholds of a job's policy (a comment's JSON, or the `--comment` of an sbatch script) and
    where they came from; the defaults without either. Raises ValueError for an unreadable or invalid policy."""
    if policy is not None and script is not None:
        raise ValueError("give --policy or --script, not both")
    if script is not None:
        try:
            text = Path(script).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise ValueError(f"cannot read the script {script}: {exc.strerror or exc}") from None
        comment = parse_script(text).value("comment")
        if comment is None:
            raise ValueError(f"the script {script} has no #SBATCH --comment, so it carries no policy")
        source = f"the policy in {script}"
    elif policy is not None:
        comment, source = comment_from_input(policy), "the given policy"
    else:
        return HangThresholds(), "the policy defaults"
    result = parse_comment(comment)
    if result.policy is None:
        raise ValueError(f"{source} is not a valid policy: {result.reason}")
    return HangThresholds.of(result.policy.anomaly_detection_config), source


def run(
    path: str,
    *,
    as_json: bool,
    settings: Settings,
    out: TextIO = sys.stdout,
    policy: str | None = None,
    script: str | None = None,
    nodes: str | None = None,
    tasks_per_node: str | None = None,
) -> int:
    """Entry point for `recovery check-log`; 0 when the file was analysed, 2 on usage errors."""
    file = Path(path)
    if not file.is_file():
        print(f"check-log: no such file: {path}", file=sys.stderr)
        return EXIT_USAGE
    try:
        thresholds, source = job_thresholds(policy=policy, script=script)
    except ValueError as exc:
        print(f"check-log: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        ruleset = load_ruleset(settings)
    except (OSError, SignatureConfigError) as exc:
        print(f"check-log: signatures file {settings.signatures_file}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    attempt_nodes = expand_hostlist((nodes or "").strip())
    data = build_report(
        str(file), ruleset, thresholds, settings=settings, attempt_nodes=attempt_nodes, tasks_per_node=tasks_per_node
    )
    data["hang_detector"]["thresholds_from"] = source
    if as_json:
        json.dump(data, out, indent=2, default=str)
        out.write("\n")
    else:
        _print_human(data, out)
    return EXIT_OK
