"""GraphQL object types, one module per area: each type wraps one ORM row and resolves its relations through
DataLoaders."""

from __future__ import annotations

from app.api.types.advice import Advice, Milestone, Reconciliation
from app.api.types.audit import AuditEvent
from app.api.types.evidence import Anomaly, Checkpoint
from app.api.types.jobs import Attempt, Job, Policy, Workflow
from app.api.types.node import Node

NODE_TYPES: dict[str, type[Node]] = {
    cls.__name__: cls for cls in (Workflow, Job, Attempt, Checkpoint, Anomaly, Advice, AuditEvent)
}

__all__ = [
    "NODE_TYPES",
    "Advice",
    "Anomaly",
    "Attempt",
    "AuditEvent",
    "Checkpoint",
    "Job",
    "Milestone",
    "Node",
    "Policy",
    "Reconciliation",
    "Workflow",
]
