"""The OpenAPI 3.1 document of the /v1 REST API, built from the same limits the handlers use.

`python -m app.api.openapi` prints it (committed as docs/openapi.json, drift-tested); the service serves it,
without authentication, at /v1/openapi.json (it describes the API and holds no data).
"""

from __future__ import annotations

import json
from typing import Any

from app import __version__
from app.advice import read_model as advice_models
from app.api.derive import openapi_object, strict_object
from app.audit import read_model as audit_models
from app.audit.service import LEVELS
from app.domain.control.identity import MAX_ATTEMPT_INDEX, MAX_SLURM_JOB_ID
from app.domain.edge import bounds
from app.domain.edge.cursor import MAX_CURSOR_LENGTH
from app.domain.presentation.story import OUTCOMES
from app.evidence import read_model as evidence_models
from app.fleet import read_model as fleet_models
from app.jobs import read_model as job_models
from app.leases import read_model as lease_models

# (default, max) page sizes; app.api.rest uses these.
JOBS_LIMITS = (100, 250)
ADVICE_LIMITS = (100, 250)
AUDIT_LIMITS = (100, 100)
AUDIT_LEVELS = LEVELS

_NULLABLE_STRING = {"type": ["string", "null"]}
_NULLABLE_INT = {"type": ["integer", "null"]}
_TIME = {"type": ["string", "null"], "format": "date-time"}
# A time filter: the service takes 1970-01-01 to 9000-01-01 (UTC); the pattern admits the years whose every zone
# offset stays inside (1971-8899), or empty (no bound): a client generating from the document never sends a time
# the service refuses.
_TIME_PARAM = {
    "type": "string",
    "format": "date-time",
    "pattern": "^$|^(197[1-9]|19[89][0-9]|[2-7][0-9]{3}|8[0-8][0-9]{2})-",
}
_STRINGS = {"type": "array", "items": {"type": "string"}}


_object = strict_object


def _text_param(name: str, description: str, max_length: int = bounds.MAX_FILTER_LENGTH) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": {"type": "string", "maxLength": max_length, "pattern": "^[^\\x00]*$"},
    }


def _bool_param(name: str, description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "description": description, "schema": {"type": "boolean"}}


def _int_param(name: str, description: str, minimum: int, maximum: int) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": {"type": "integer", "minimum": minimum, "maximum": maximum},
    }


def _paging(limits: tuple[int, int]) -> list[dict[str, Any]]:
    return [
        _int_param("limit", f"Page size (default {limits[0]}).", 1, limits[1]),
        {
            "name": "page",
            "in": "query",
            "required": False,
            "description": "The nextPageToken of the previous page of the same listing (the user guide's name).",
            "schema": {"type": "string", "maxLength": MAX_CURSOR_LENGTH},
        },
        {
            "name": "pageToken",
            "in": "query",
            "required": False,
            "description": "Same as page (page wins when both are given).",
            "schema": {"type": "string", "maxLength": MAX_CURSOR_LENGTH},
        },
    ]


# A refused job has no attempts: its enrolment says why (issue 26), instead of a 404.
ENROLMENT = {
    "oneOf": [
        {"type": "null"},
        _object(
            {
                "jobId": {"type": "integer"},
                "cluster": {"type": "string"},
                "enrolled": {"type": "boolean"},
                "enrolment": {"type": "string"},
                "reason": _NULLABLE_STRING,
            }
        ),
    ]
}


STORY = {
    "oneOf": [
        {"type": "null"},
        _object(
            {
                "sentence": {"type": "string"},
                "outcome": {"type": "string", "enum": list(OUTCOMES)},
                "happened": {"type": "string"},
                "decided": {"type": "string"},
                "result": {"type": "string"},
                "nextAttemptIndex": _NULLABLE_INT,
                "cites": {
                    "oneOf": [{"type": "null"}, openapi_object(evidence_models.ANOMALY)],
                    "description": "The anomaly the story cites: the one its Advice was decided on (a crash's "
                    "root cause, a hang's NO_PROGRESS), else the attempt's newest decided anomaly; its fingerprint "
                    "is the same on a rerun that fails the same way.",
                },
            }
        ),
    ],
    "description": "One plain sentence: what happened, what Recovery decided, whether it happened.",
}
STACK_CAPTURE = {**openapi_object(evidence_models.STACK_CAPTURE), "type": ["object", "null"]}  # null: none taken
ATTEMPT = openapi_object(job_models.ATTEMPT, {"story": STORY, "stackCapture": STACK_CAPTURE})
MILESTONE = openapi_object(advice_models.SCHEDULER_ACTION)
ADVICE = openapi_object(
    advice_models.ADVICE,
    {
        "reconciliationStatus": openapi_object(
            advice_models.RECONCILIATION,
            {"milestones": {"type": "array", "items": {"$ref": "#/components/schemas/Milestone"}}},
        )
    },
)
WORKFLOW = openapi_object(job_models.WORKFLOW, {"outcome": {"type": "string", "enum": list(OUTCOMES)}})
AUDIT_EVENT = openapi_object(audit_models.AUDIT_EVENT)
LEASE = {**openapi_object(lease_models.LEASE), "type": ["object", "null"]}  # a cluster whose worker never ran has none
CLUSTER_OVERVIEW = openapi_object(lease_models.CLUSTER, {"worker": LEASE, "watchdog": LEASE})
COMPUTE_NODE = openapi_object(
    fleet_models.COMPUTE_NODE, {"evidence": {"type": "array", "items": openapi_object(fleet_models.NODE_EVIDENCE)}}
)
NEED = openapi_object(advice_models.NEED)
OPERATOR_DAY = openapi_object(
    advice_models.OPERATOR_DAY, {"needsYou": {"type": "array", "items": {"$ref": "#/components/schemas/Need"}}}
)
INSTALLATION = _object(
    {
        "version": {"type": "string"},
        "cluster": {"type": "string"},
        "environment": {"type": "string"},
        "managedPartitions": _STRINGS,
        "clusters": {
            "type": "array",
            "items": _object(
                {"name": {"type": "string"}, "environment": {"type": "string"}, "managedPartitions": _STRINGS}
            ),
        },
    }
)
ERROR = _object({"error": _object({"code": {"type": "string"}, "message": {"type": "string"}})})


def _list(name: str, item: str) -> dict[str, Any]:
    return _object(
        {
            name: {"type": "array", "items": {"$ref": f"#/components/schemas/{item}"}},
            "nextPageToken": _NULLABLE_STRING,
        }
    )


def _responses(ok: str, *, not_found: bool = False) -> dict[str, Any]:
    def error(description: str) -> dict[str, Any]:
        return {
            "description": description,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
        }

    responses: dict[str, Any] = {
        "200": {
            "description": "OK",
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{ok}"}}},
        },
        "400": error("A parameter or page token cannot be used (code INVALID_ARGUMENT)."),
        "401": error("No valid bearer token (code UNAUTHENTICATED)."),
        "403": error("The token holds neither the viewer nor the operator role (code PERMISSION_DENIED)."),
        "503": error("Authentication or the database is unavailable (code UNAVAILABLE)."),
    }
    if not_found:
        responses["404"] = error("No attempts are recorded for this job id (code NOT_FOUND).")
    return responses


CLUSTER = _text_param("cluster", "Only this cluster.")


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of /v1 (paths relative to the service root, or its RECOVERY_URL_PREFIX)."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Recovery REST API",
            "version": __version__,
            "description": "Read-only JSON endpoints beside GraphQL. Every endpoint but this document needs "
            "`Authorization: Bearer <access token>` with the viewer or operator role.",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": {
            "/v1/jobs/by-scheduler-id/{job_id}": {
                "get": {
                    "operationId": "jobsBySchedulerId",
                    "summary": "The attempts recorded under a Slurm job id, and the job's enrolment "
                    "(a refused job: no attempts and the reason it was refused).",
                    "parameters": [
                        {
                            "name": "job_id",
                            "in": "path",
                            "required": True,
                            "description": f"A Slurm job id (1..{MAX_SLURM_JOB_ID}) or an array task as "
                            "<array job id>_<task id>, e.g. 1234_7.",
                            # an array task's id: up to 9 + 6 digits stays inside both ranges the server checks
                            "schema": {
                                "oneOf": [
                                    {"type": "integer", "minimum": 1, "maximum": MAX_SLURM_JOB_ID},
                                    {"type": "string", "pattern": "^[1-9][0-9]{0,8}_[0-9]{1,6}$"},
                                ]
                            },
                        },
                        CLUSTER,
                        *_paging(JOBS_LIMITS),
                    ],
                    "responses": _responses("AttemptList", not_found=True),
                }
            },
            "/v1/advice": {
                "get": {
                    "operationId": "listAdvice",
                    "summary": "Advice, newest first.",
                    "parameters": [
                        _bool_param("onlyActive", "Only Advice that may still need reconciliation."),
                        CLUSTER,
                        *_paging(ADVICE_LIMITS),
                    ],
                    "responses": _responses("AdviceList"),
                }
            },
            "/v1/workflows": {
                "get": {
                    "operationId": "listWorkflows",
                    "summary": "Workflows, most recently updated first.",
                    "parameters": [
                        CLUSTER,
                        _text_param("environment", "Only this environment."),
                        _text_param("state", "State of the newest attempt, e.g. FAILED."),
                        _text_param(
                            "search", "Substring of the workflow key or latest job name.", bounds.MAX_SEARCH_LENGTH
                        ),
                        _bool_param(
                            "failedOnly",
                            "Only workflows that had a failure "
                            "(a failed attempt, any Advice or a detected crash or hang).",
                        ),
                        {
                            "name": "outcome",
                            "in": "query",
                            "required": False,
                            "description": "Only workflows with this outcome (the dashboard's Outcome column).",
                            "schema": {"type": "string", "enum": list(OUTCOMES)},
                        },
                        *_paging(JOBS_LIMITS),
                    ],
                    "responses": _responses("WorkflowList"),
                }
            },
            "/v1/audit/events": {
                "get": {
                    "operationId": "listAuditEvents",
                    "summary": "Audit events with the SPEC §7 filters.",
                    "parameters": [
                        _int_param("jobId", "Slurm job id.", 1, MAX_SLURM_JOB_ID),
                        _int_param("attemptIndex", "Attempt index (needs jobId).", 0, MAX_ATTEMPT_INDEX),
                        _text_param("component", "Component that recorded the event."),
                        _text_param("eventType", "Exact event type."),
                        {
                            "name": "level",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "string", "enum": list(AUDIT_LEVELS)},
                        },
                        {
                            "name": "producedAfter",
                            "in": "query",
                            "required": False,
                            "description": "Inclusive lower bound: ISO 8601 with a zone, or Unix microseconds; "
                            f"between {bounds.MIN_TIME.date()} and {bounds.MAX_TIME.date()}.",
                            "schema": _TIME_PARAM,
                        },
                        {
                            "name": "producedBefore",
                            "in": "query",
                            "required": False,
                            "description": "Exclusive upper bound, like producedAfter.",
                            "schema": _TIME_PARAM,
                        },
                        CLUSTER,
                        {
                            "name": "order",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "string", "enum": ["asc", "desc"]},
                        },
                        *_paging(AUDIT_LIMITS),
                    ],
                    "responses": _responses("AuditEventList"),
                }
            },
            "/v1/installation": {
                "get": {
                    "operationId": "installation",
                    "summary": "The service's version, environment and managed partitions (what check-script "
                    "--server judges against).",
                    "parameters": [],
                    "responses": _responses("Installation"),
                }
            },
            "/v1/clusters": {
                "get": {
                    "operationId": "listClusters",
                    "summary": "Every cluster of the installation with its counts and worker/watchdog leases.",
                    "parameters": [CLUSTER],
                    "responses": _responses("ClusterList"),
                }
            },
            "/v1/operator-day": {
                "get": {
                    "operationId": "operatorDay",
                    "summary": "The operator's day: counters of the last hours and what needs someone now, the same "
                    "read as the dashboard's home page (GraphQL operatorDay).",
                    "parameters": [
                        _int_param("hours", "The range in hours (default 24).", 1, 8760),
                        _text_param("cluster", "Only this cluster (default: every cluster)."),
                    ],
                    "responses": _responses("OperatorDay"),
                }
            },
            "/v1/nodes": {
                "get": {
                    "operationId": "listNodes",
                    "summary": "Node reputation across jobs: every node hardware/infrastructure evidence blamed (or an "
                    "operator pinned), its state, jobs and evidence.",
                    "parameters": [CLUSTER, _text_param("state", "Only nodes in this state, e.g. SUSPECT.")],
                    "responses": _responses("NodeList"),
                }
            },
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}},
            "schemas": {
                "Attempt": ATTEMPT,
                "Milestone": MILESTONE,
                "Advice": ADVICE,
                "Workflow": WORKFLOW,
                "AuditEvent": AUDIT_EVENT,
                "Error": ERROR,
                "AttemptList": _object(
                    {
                        "attempts": {"type": "array", "items": {"$ref": "#/components/schemas/Attempt"}},
                        "nextPageToken": _NULLABLE_STRING,
                        "enrolment": ENROLMENT,
                    }
                ),
                "AdviceList": _list("advice", "Advice"),
                "WorkflowList": _list("workflows", "Workflow"),
                "AuditEventList": _list("events", "AuditEvent"),
                "ClusterOverview": CLUSTER_OVERVIEW,
                "Installation": INSTALLATION,
                "ComputeNode": COMPUTE_NODE,
                "NodeList": _object(
                    {"nodes": {"type": "array", "items": {"$ref": "#/components/schemas/ComputeNode"}}}
                ),
                "Need": NEED,
                "OperatorDay": OPERATOR_DAY,
                "ClusterList": _object(
                    {"clusters": {"type": "array", "items": {"$ref": "#/components/schemas/ClusterOverview"}}}
                ),
            },
        },
    }


def printed_document() -> str:
    """The JSON as committed in docs/openapi.json."""
    return json.dumps(openapi_document(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    print(printed_document(), end="")
