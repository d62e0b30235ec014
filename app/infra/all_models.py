"""Imports every ORM model so that Base.metadata is complete (Alembic and tests use it)."""

from app.advice.models import Advice, SchedulerAction
from app.audit.models import AuditEvent
from app.evidence.models import Anomaly, Checkpoint, LogSource, PendingLogEvent, StackCapture
from app.feed.models import ChangeFeedEntry
from app.fleet.models import BudgetExtension, ClusterPause, NodeBlame, NodeStanding, RecoveryHold, RestartGrant
from app.infra.db import Base
from app.ingest.models import PushedLine, PushStream
from app.jobs.models import Attempt, Job, Policy, Workflow
from app.leases.models import WorkerLease, WorkerPosition
from app.notify.models import Notification, NotificationDelivery
from app.sessions.models import RevokedSession

__all__ = [
    "Advice",
    "Anomaly",
    "Attempt",
    "AuditEvent",
    "Base",
    "BudgetExtension",
    "ChangeFeedEntry",
    "Checkpoint",
    "ClusterPause",
    "Job",
    "LogSource",
    "NodeBlame",
    "NodeStanding",
    "Notification",
    "NotificationDelivery",
    "PendingLogEvent",
    "Policy",
    "PushStream",
    "PushedLine",
    "RecoveryHold",
    "RestartGrant",
    "RevokedSession",
    "SchedulerAction",
    "StackCapture",
    "WorkerLease",
    "WorkerPosition",
    "Workflow",
]
