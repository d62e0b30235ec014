"""Per-request DataLoaders: every field that fans out over a page loads through one batched statement."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Any

from strawberry.dataloader import DataLoader

from app.advice import queries as advice_queries
from app.advice import stories
from app.audit import queries as audit_queries
from app.evidence import queries as evidence_queries
from app.goodput import queries as goodput_queries
from app.infra.db import Sessions
from app.jobs import queries as job_queries

ByIds = Callable[..., Awaitable[dict[Any, Any]]]


class Loaders:
    """The DataLoaders of one request (or, without caching, of one subscription connection)."""

    def __init__(self, sessions: Sessions, *, cache: bool = True) -> None:
        self._sessions = sessions

        def keyed(fn: ByIds, arg: str = "ids", default: Any = None) -> DataLoader[Any, Any]:
            async def load(keys: Sequence[Any]) -> list[Any]:
                async with sessions() as session:
                    found = await fn(session, **{arg: list(keys)})
                return [found.get(key, default() if callable(default) else default) for key in keys]

            return DataLoader(load_fn=load, cache=cache)

        def limited(fn: ByIds, arg: str) -> DataLoader[tuple[int, int], list[Any]]:
            # Keys are (parent id, limit); one statement per distinct limit (normally one).
            async def load(keys: Sequence[tuple[int, int]]) -> list[list[Any]]:
                by_limit: dict[int, list[int]] = defaultdict(list)
                for parent, limit in keys:
                    by_limit[limit].append(parent)
                results: dict[tuple[int, int], list[Any]] = {}
                async with sessions() as session:
                    for limit, parents in by_limit.items():
                        found = await fn(session, **{arg: parents, "limit": limit})
                        results.update({(parent, limit): found.get(parent, []) for parent in parents})
                return [results[key] for key in keys]

            return DataLoader(load_fn=load, cache=cache)

        self.workflow = keyed(job_queries.workflows_by_ids)
        self.job = keyed(job_queries.jobs_by_ids)
        self.attempt = keyed(job_queries.attempts_by_ids)
        self.policy = keyed(job_queries.policies_by_job_ids, "job_ids")
        self.attempt_count = keyed(job_queries.count_attempts_of_jobs, "job_ids", 0)
        self.checkpoint = keyed(evidence_queries.checkpoints_by_ids)
        self.anomaly = keyed(evidence_queries.anomalies_by_ids)
        self.advice = keyed(advice_queries.advice_by_ids)
        self.advice_of_attempt = keyed(advice_queries.advice_of_attempts, "attempt_ids")
        self.stack_capture_of_attempt = keyed(evidence_queries.stack_captures_of_attempts, "attempt_ids")
        self.milestones = keyed(advice_queries.milestones_of_advice, "advice_ids", list)
        self.audit_event = keyed(audit_queries.events_by_ids)
        self.stories = keyed(stories.stories_of_jobs, "job_ids", list)  # job id -> [Told] in attempt order
        self.latest_job = keyed(job_queries.latest_jobs_of_workflows, "workflow_ids")
        self.workflow_goodput = keyed(goodput_queries.workflows_goodput, "workflow_ids", goodput_queries.GoodputReport)
        self.first_attempts = limited(job_queries.first_attempts_of_jobs, "job_ids")
        self.latest_checkpoints = limited(evidence_queries.latest_checkpoints_of_attempts, "attempt_ids")
        self.latest_anomalies = limited(evidence_queries.latest_anomalies_of_attempts, "attempt_ids")

    @property
    def sessions(self) -> Sessions:
        return self._sessions

    def by_type(self, type_name: str) -> DataLoader[Hashable, Any] | None:
        """The by-id loader of a Node type (for `node(id:)`)."""
        return {
            "Workflow": self.workflow,
            "Job": self.job,
            "Attempt": self.attempt,
            "Checkpoint": self.checkpoint,
            "Anomaly": self.anomaly,
            "Advice": self.advice,
            "AuditEvent": self.audit_event,
        }.get(type_name)
