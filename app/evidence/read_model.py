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
