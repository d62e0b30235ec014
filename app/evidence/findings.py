"""An attempt's recorded crash anomalies as root-cause findings: primary cause, outlook, blamed nodes."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from app.domain.decision import rootcause
from app.domain.detection import line_nodes
from app.domain.detection.progress import parse_bar_line
from app.domain.detection.signatures import Classifier
from app.evidence.models import Anomaly
from app.evidence.queries import AFTER_RECOVERY_ACTED


@dataclass(frozen=True)
class AttemptCause:
    """What the advisor needs from an attempt's crash evidence."""

    category: str | None = None
    outlook: str | None = None
    signature: str | None = None  # the root cause's fingerprint (rootcause.fingerprint)
    iteration: int | None = None
    blamed: tuple[str, ...] = ()
    primary_anomaly_id: int | None = None
    node: str | None = None  # where the failed process ran (rootcause.failed_node), when the evidence says
    node_from: str | None = None  # how `node` was found, when the root cause's own line does not name it
    # every crash line so far only reports another failure (a lost peer, a SIGTERM, a re-raise of a worker's)
    consequence_only: bool = False
    # Blame derived now for anomalies recorded before the attempt's node list was known: id -> blamed nodes.
    derived: dict[int, list[dict[str, str]]] = field(default_factory=dict)


def finding_of(row: Anomaly) -> rootcause.Finding:
    details = row.details or {}
    nodes = details.get("nodes")
    return rootcause.Finding(
        category=row.category,
        rule=str(details.get("rule") or ""),
        line=row.line or "",
        detail=str(details.get("detail") or ""),
        nodes=tuple(str(n) for n in nodes) if isinstance(nodes, list) else ((row.node,) if row.node else ()),
        rank=details.get("rank") if isinstance(details.get("rank"), int) else None,
        xid=row.xid,
        source_time=row.source_time,
        order=row.id,
        first_observed=bool(details.get("firstObserved")),
    )


def process_lines_of(row: Anomaly) -> tuple[str, ...]:
    """Lines naming the failed process kept with a crash recorded before the attempt's node list was known."""
    lines = (row.details or {}).get("processLines")
    return tuple(str(line) for line in lines) if isinstance(lines, list) else ()


def blamed_nodes(
    row: Anomaly,
    *,
    attempt_nodes: Sequence[str] = (),
    tasks_per_node: str | None = None,
    finding: rootcause.Finding | None = None,
) -> set[str]:
    """Nodes a crash anomaly blames: its stored attribution, or (the attempt's node list arrived later) derived now
    from `finding` (the row's finding with the nodes its lines name in the allocation), else from the row."""
    if row.blamed_nodes:
        return {str(entry.get("node")) for entry in row.blamed_nodes if entry.get("node")}
    if row.blamed_nodes is None and row.outlook is None:
        # Recorded before outlooks existed: every node the evidence names, as before.
        named = {part.strip() for part in (row.node or "").split(",") if part.strip()}
        nodes = (row.details or {}).get("nodes")
        return named | ({str(n) for n in nodes} if isinstance(nodes, list) else set())
    attribution = rootcause.attribute(
        finding or finding_of(row), attempt_nodes=attempt_nodes, tasks_per_node=tasks_per_node
    )
    return {node.node for node in attribution.blamed}


def job_dirs_of(*paths: str | None) -> tuple[str, ...]:
    """The directories of an attempt's output files: paths under them do not make a failure different."""
    return tuple(dict.fromkeys(os.path.dirname(p) for p in paths if p and os.path.dirname(p) not in ("", "/")))


def iteration_of(progress_line: str | None, classifier: Classifier | None) -> int | None:
    """The iteration a progress line names: a configured marker's, else its step counter's (None when neither)."""
    if not progress_line:
        return None
    if classifier is not None:
        for part in reversed(progress_line.split("\r")):
            marker = classifier.progress(part)
            if marker is not None and marker.iteration is not None:
                return marker.iteration
    reading = parse_bar_line(progress_line)
    return reading.iteration if reading is not None else None


def attempt_cause(
    rows: Sequence[Anomaly],
    *,
    attempt_nodes: Sequence[str] = (),
    tasks_per_node: str | None = None,
    progress_line: str | None = None,
    classifier: Classifier | None = None,
    job_dirs: Sequence[str] = (),
) -> AttemptCause:
    """Primary cause of an attempt's crash anomalies (up to the one being decided), with its outlook and blame."""
    crashes = [row for row in rows if row.kind == "CRASH"]
    if not crashes:
        return AttemptCause()
    findings = [
        line_nodes.with_line_nodes(finding_of(row), attempt_nodes, tasks_per_node, process_lines_of(row))
        for row in crashes
    ]
    # Lines printed after Recovery acted are never a cause, but srun's exit line among them says where the
    # failed task ran (Recovery often acts before srun reports the first task's exit).
    hints = [finding_of(row) for row in rows if row.kind == AFTER_RECOVERY_ACTED]
    cause = rootcause.analyse(findings, attempt_nodes=attempt_nodes, tasks_per_node=tasks_per_node, node_hints=hints)
    first = cause.primary
    blamed: set[str] = set()
    derived: dict[int, list[dict[str, str]]] = {}
    for row, finding in zip(crashes, findings, strict=True):
        found = blamed_nodes(row, attempt_nodes=attempt_nodes, tasks_per_node=tasks_per_node, finding=finding)
        blamed |= found
        if found and row.blamed_nodes == [] and row.outlook is not None:
            attribution = rootcause.attribute(finding, attempt_nodes=attempt_nodes, tasks_per_node=tasks_per_node)
            derived[row.id] = [node.to_json() for node in attribution.blamed]
    if first is None:
        return AttemptCause(blamed=tuple(sorted(blamed)), derived=derived)
    row = crashes[findings.index(first)]
    # Recomputed, not read from the row: rows recorded by an older normaliser compare like new ones.
    signature = rootcause.fingerprint(first.category, first.detail or first.line, job_dirs=job_dirs)
    return AttemptCause(
        category=first.category,
        outlook=row.outlook or cause.outlook,
        signature=str(signature),
        iteration=iteration_of(progress_line, classifier),
        blamed=tuple(sorted(blamed)),
        primary_anomaly_id=row.id,
        node=cause.node,
        node_from=cause.node_from,
        consequence_only=rootcause.known_consequence(first) or rootcause.reraised(first),
        derived=derived,
    )
