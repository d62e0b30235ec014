"""Schemathesis against the served OpenAPI document of /v1, with a real bearer token: no 5xx, and every answer
conforms to the document (status codes, content types, response schemas), valid input accepted, invalid refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hostile.helpers import Target, make_world
from tests.plugins import require

pytestmark = [pytest.mark.oidc, pytest.mark.slow]

CHECKS = [
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    "negative_data_rejection",
    "positive_data_acceptance",
    "ignored_auth",
    "unsupported_method",
    "missing_required_header",
]
MAX_EXAMPLES = 40
MAX_GRAPHQL_EXAMPLES = 20


def _schemathesis() -> Path:
    executable = Path(sys.executable).parent / "schemathesis"
    if not executable.exists():
        require("schemathesis", f"{executable} is missing: install the test extras (pip install -e '.[test]')")
    return executable


def _config(target: Target, path: Path) -> Path:
    """Page tokens are opaque: a random string is rightly refused (400), so each listing gets a real one."""
    world = make_world(target)
    templates = {
        "/v1/jobs/by-scheduler-id/{job_id}": f"/v1/jobs/by-scheduler-id/{world.job_id}",
        "/v1/advice": "/v1/advice",
        "/v1/workflows": "/v1/workflows",
        "/v1/audit/events": "/v1/audit/events",
    }
    blocks = []
    for template, real in templates.items():
        fixed: dict[str, object] = {"query.page": world.rest_cursors[real], "query.pageToken": world.rest_cursors[real]}
        if template == "/v1/audit/events":
            fixed["query.jobId"] = world.job_id  # attemptIndex needs jobId, which a schema cannot say
        values = ", ".join(f'"{k}" = {json.dumps(v)}' for k, v in fixed.items())
        blocks.append(f'[[operations]]\ninclude-path = "{template}"\nparameters = {{ {values} }}\n')
    path.write_text("\n".join(blocks))
    return path


def test_rest_api_conforms_to_its_openapi_document(target: Target, tmp_path: Path) -> None:
    executable = _schemathesis()
    report = tmp_path / "schemathesis.xml"
    config = _config(target, tmp_path / "schemathesis.toml")
    command = [
        str(executable),
        "--config-file",
        str(config),
        "run",
        f"{target.server.url}/v1/openapi.json",
        "--url",
        target.server.url,
        "--checks",
        ",".join(CHECKS),
        "--header",
        f"Authorization: Bearer {target.tokens['viewer']}",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        "14",
        "--generation-database",
        "none",
        "--phases",
        "examples,coverage,fuzzing",
        "--request-timeout",
        "20",
        "--workers",
        "1",
        "--no-color",
        "--report",
        "junit",
        "--report-junit-path",
        str(report),
    ]
    done = subprocess.run(
        command,
        cwd=tmp_path,  # schemathesis keeps a cache folder where it runs: not in the repository
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "NO_COLOR": "1"},
        check=False,
    )
    output = done.stdout + done.stderr
    print(output[-1500:])
    assert done.returncode == 0, output[-6000:]
    assert "No issues found" in output or " passed" in output, output[-3000:]
    assert target.tokens["viewer"] not in target.server.log()


def test_graphql_api_never_fails_under_schemathesis(target: Target, tmp_path: Path) -> None:
    """Schemathesis's GraphQL mode over every query and mutation (operator token): no 5xx, and afterwards no
    unexpected (masked) error in the server's log."""
    executable = _schemathesis()
    command = [
        str(executable),
        "run",
        f"{target.server.url}/graphql",
        "--checks",
        "not_a_server_error",
        "--header",
        f"Authorization: Bearer {target.tokens['operator']}",
        "--max-examples",
        str(MAX_GRAPHQL_EXAMPLES),
        "--seed",
        "14",
        "--generation-database",
        "none",
        "--request-timeout",
        "20",
        "--workers",
        "1",
        "--no-color",
    ]
    done = subprocess.run(
        command,
        cwd=tmp_path,  # schemathesis keeps a cache folder where it runs: not in the repository
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "NO_COLOR": "1"},
        check=False,
    )
    output = done.stdout + done.stderr
    print(output[-1200:])
    assert done.returncode == 0, output[-6000:]
    log = target.server.log()
    assert "GraphQL error id" not in log and "Exception in ASGI application" not in log, log[-3000:]
