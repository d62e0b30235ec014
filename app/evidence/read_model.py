"""Read models of the evidence read from attempt logs (checkpoints, anomalies): their fields as the APIs show them."""

from __future__ import annotations

import datetime as dt
from typing import Any

from app.evidence.queries import AFTER_RECOVERY_ACTED
from app.infra.read_model_fields import Field, GlobalId, ReadModel, Resolved

_ID = Field("id", GlobalId, description="Opaque global id.", rest=False)

CHECKPOINT = ReadModel(
    "Checkpoint",
    (
        _ID,
        Field("kind", str, description="saved, loaded or failed."),
        Field("framework", str, nullable=True),
        Field("iteration", int, nullable=True),
        Field("path", str, nullable=True, description="The checkpoint's path as the log line names it."),
        Field("log_path", str, nullable=True),
        Field("line_number", int, nullable=True),
        Field("line", str, nullable=True),
        Field(
            "source_time",
            dt.datetime,
            nullable=True,
            description="Timestamp parsed from the log line, when it had one.",
        ),
        Field("read_time", dt.datetime),
    ),
)


def _role(row: Any) -> str | None:
    if row.kind == AFTER_RECOVERY_ACTED:
        return "after Recovery acted"
    role = (row.details or {}).get("role")
    return str(role) if role else None


def _detail(key: str) -> Any:
    def read(row: Any) -> str | None:
        value = (row.details or {}).get(key)
        return str(value) if value else None

    return read


# REST shows an anomaly where a story cites it: the fields that say what and where (the rest=True ones).
ANOMALY = ReadModel(
    "Anomaly",
    (
        _ID,
        Field(
            "kind",
            str,
            description="CRASH, NO_PROGRESS, SLOWDOWN or SCHEDULER_FAILURE; AFTER_RECOVERY_ACTED for a crash line "
            "printed after Recovery sent requeue-hold or cancel (kept apart, never decided on).",
        ),
        Field("category", str),
        Field("detector", str, rest=False),
        Field("message", str, nullable=True, rest=False),
        Field("node", str, nullable=True, description="The node the evidence names, if any."),
        Field("xid", int, nullable=True, rest=False),
        Field(
            "outlook",
            str,
            nullable=True,
            rest=False,
            description="Retry outlook of a crash: infrastructure (retry excluding blamed nodes), transient (retry "
            "without exclusion) or application (a deterministic error in the program); null for other kinds.",
        ),
        Resolved("blamed_nodes"),
        Field(
            "role",
            str,
            nullable=True,
            source=_role,
            description="This crash's place in its attempt's failure: 'root cause' (the line the failure started "
            "from), 'consequence' (another process reporting it, Slurm ending the step) or 'after Recovery acted' "
            "(printed after Recovery sent requeue-hold or cancel: kept, never decided on); null until decided "
            "and for other kinds.",
        ),
        Field(
            "fingerprint",
            str,
            nullable=True,
            source=_detail("fingerprint"),
            description="Short stable id of the failure fingerprint ('fp-3f2a9c0b1d4e'): the same on a rerun that "
            "fails the same way (timestamps, PIDs, ports, addresses, ranks and log prefixes do not count).",
        ),
        Field(
            "fingerprint_text",
            str,
            nullable=True,
            source=_detail("signature"),
            description="The fingerprint's text: category and the normalised origin line.",
        ),
        Field("log_path", str, nullable=True),
        Field("line_number", int, nullable=True),
        Field("line", str, nullable=True),
        Field("source_time", dt.datetime, nullable=True, rest=False),
        Field("details", dict, rest=False),
        Field("detected_at", dt.datetime, rest=False),
    ),
)


def merged_stacks(row: Any) -> str:
    """The capture's merged stacks in one line: "ranks 0, 2: `x` in `a.py:1`; rank 1: `y` in `b.py:2`"."""
    parts = []
    for group in row.groups or []:
        ranks = [str(r) for r in group.get("ranks") or []]
        numbers = [r.removeprefix("rank ") for r in ranks]
        ranked = all(r.startswith("rank ") for r in ranks)
        who = (("ranks " if len(numbers) > 1 else "rank ") + ", ".join(numbers)) if ranked else ", ".join(ranks)
        parts.append(f"{who}: {group.get('where')}" + (" (outlier)" if group.get("outlier") else ""))
    return "; ".join(parts)


def _judged(key: str) -> Any:
    def read(row: Any) -> str | None:
        value = (row.judgment or {}).get(key)
        return str(value) if value is not None else None

    return read


STACK_CAPTURE = ReadModel(
    "StackCapture",
    (
        _ID,
        Field(
            "status",
            str,
            description="CAPTURED (every node answered), PARTIAL (some did), FAILED or TIMEOUT (none did; recovery "
            "went on as before).",
            choices=("CAPTURED", "PARTIAL", "FAILED", "TIMEOUT"),
        ),
        Field("mode", str, nullable=True, description="The Advice's mode when the stacks were taken (act or observe)."),
        Field("command", str, description="The srun command that ran the probe on every node."),
        Field(
            "duration_ms", float, description="How long the capture took (bounded by RECOVERY_STACK_CAPTURE_TIMEOUT)."
        ),
        Field("bytes", int, description="Bytes the nodes answered."),
        Field("nodes_asked", (list, str)),
        Field("nodes_answered", (list, str)),
        Field("merged", str, source=merged_stacks, description="Identical stacks grouped with their rank list."),
        Field(
            "groups",
            (list, dict),
            description="Merged stacks: {ranks, nodes, where, state, wchan, frames, outlier}, largest group first.",
        ),
        Field(
            "ranks",
            (list, dict),
            description="Every process seen: {rank, node, pid, state (R/S/D/T), wchan, frames, where, error}.",
        ),
        Field(
            "judgment",
            dict,
            nullable=True,
            description="The rank that held the others back: {rank, node, where, why, outlook, blameNode, sentence}.",
        ),
        Field("sentence", str, nullable=True, source=_judged("sentence"), description="The judgment in one sentence."),
        Field("problems", (list, str), description="What could not be read (a node that did not answer, permissions)."),
        Field(
            "reports",
            (list, dict),
            graphql=False,
            description="The nodes' raw reports (py-spy and nvidia-smi text, bounded; flight-recorder positions).",
        ),
        Field("captured_at", dt.datetime),
    ),
)
