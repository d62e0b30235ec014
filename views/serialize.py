"""The raw JSON view of an attempt and everything attached to it (for `<details>` and `?format=json`)."""

from __future__ import annotations

from typing import Any

from app.infra.db import row_dict


def attempt_json(
    *,
    attempt: Any,
    job: Any,
    policy: Any,
    workflow: Any,
    checkpoints: list[Any],
    anomalies: list[Any],
    advice: Any,
    milestones: list[Any],
) -> dict[str, Any]:
    """One attempt as stored, with its job, policy, workflow, evidence, Advice and milestones."""
    return {
        "attempt": row_dict(attempt),
        "attemptRef": f"{attempt.slurm_job_id}-{attempt.attempt_index}",
        "heimdallJobId": attempt.uuid,
        "job": row_dict(job),
        "policy": row_dict(policy),
        "workflow": row_dict(workflow),
        "checkpoints": [row_dict(c) for c in checkpoints],
        "anomalies": [row_dict(a) for a in anomalies],
        "advice": row_dict(advice),
        "milestones": [row_dict(m) for m in milestones],
    }
