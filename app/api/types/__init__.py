"""GraphQL object types, one module per area: each type wraps one ORM row and resolves its relations through
DataLoaders."""

from __future__ import annotations

from typing import Any

from app.api.types.advice import Advice, Milestone, Reconciliation
from app.api.types.audit import AuditEvent, audit_event
from app.api.types.evidence import Anomaly, Checkpoint
from app.api.types.jobs import Attempt, Job, Policy, Workflow
from app.api.types.node import Node

NODE_TYPES: dict[str, type[Node]] = {
    cls.__name__: cls for cls in (Workflow, Job, Attempt, Checkpoint, Anomaly, Advice, AuditEvent)
}
# How `node(id:)` builds each type from its row (most wrap the row; audit events copy their columns).
NODE_BUILDERS: dict[str, Any] = {**{name: (lambda row, cls=cls: cls(row=row)) for name, cls in NODE_TYPES.items()}}
NODE_BUILDERS["AuditEvent"] = audit_event

__all__ = [
    "NODE_BUILDERS",
    "NODE_TYPES",
    "Advice",
    "Anomaly",
    "Attempt",
    "AuditEvent",
    "Checkpoint",
    "Job",
    "Milestone",
    "Node",
    "audit_event",
    "Policy",
    "Reconciliation",
    "Workflow",
]
