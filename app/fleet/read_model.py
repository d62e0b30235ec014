"""Read models of compute nodes and the evidence that blamed them: their fields as the GraphQL and REST APIs show
them."""

from __future__ import annotations

import datetime as dt
from typing import Any

from app.domain.fleetwide import trust as rules
from app.fleet.service import shown_state
from app.infra.db import utcnow
from app.infra.read_model_fields import Field, Given, ReadModel, Resolved

NODE_STATES = (rules.NODE_OK, rules.NODE_SUSPECT, rules.NODE_PINNED, rules.NODE_CLEARED, rules.NODE_EXPIRED)


def node_state(row: Any) -> str:
    """A node's state as operators see it now."""
    return shown_state(row, utcnow())


NODE_EVIDENCE = ReadModel(
    "NodeEvidence",
    (
        Field("job_id", int, source="slurm_job_id", description="Slurm job id."),
        Field("attempt_index", int),
        Field("category", str, nullable=True, description="Root-cause category, e.g. XID or NODE_FAIL."),
        Field("outlook", str, nullable=True),
        Field("blamed_at", dt.datetime),
        Field(
            "refs",
            (list, str),
            source=lambda row: [str(r) for r in (row.evidence or {}).get("refs", [])],
            rest=False,
            description="Evidence references (anomaly:<id>, attempt_state:...).",
        ),
    ),
)

# Of a node standing (app.fleet.queries.node_overview); its blames are NODE_EVIDENCE rows.
COMPUTE_NODE = ReadModel(
    "ComputeNode",
    (
        Field("cluster", str),
        Field("name", str, source="node"),
        Field(
            "state",
            str,
            source=node_state,
            choices=NODE_STATES,
            description="OK, SUSPECT, PINNED (an operator), CLEARED (an operator) or EXPIRED.",
        ),
        Field(
            "excluded",
            bool,
            source=lambda row: node_state(row) in (rules.NODE_SUSPECT, rules.NODE_PINNED),
            description="Later Advice for any job on the cluster excludes this node.",
        ),
        Field(
            "suspect_until",
            dt.datetime,
            nullable=True,
            description="When the suspicion expires unless renewed.",
        ),
        Field("suspect_since", dt.datetime, nullable=True),
        Field(
            "jobs",
            (list, int),
            description="Slurm job ids whose evidence blamed it within the window.",
        ),
        Field("pinned", bool, source=lambda row: bool(row.pinned)),
        Field(
            "changed_by",
            str,
            nullable=True,
            description="The operator who last pinned, unpinned or cleared it.",
        ),
        Field(
            "drain_status",
            str,
            nullable=True,
            description="SHADOW (observe), SENT, DRAINED, REFUSED or FAILED.",
        ),
        Field("drain_message", str, nullable=True),
        Resolved("evidence"),
        Field("evidence", (list, dict), graphql=False, source=Given),
    ),
)
