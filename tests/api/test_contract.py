"""The committed contract: graphql/schema.graphql is the printed schema, and every operation validates against it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.api.schema import printed_schema
from graphql import (
    DocumentNode,
    GraphQLObjectType,
    GraphQLSchema,
    OperationDefinitionNode,
    build_schema,
    parse,
    validate,
)

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_FILE = ROOT / "graphql" / "schema.graphql"
OPERATION_FILES = sorted((ROOT / "graphql" / "operations").glob("*.graphql"))


def test_committed_schema_matches_the_code() -> None:
    committed = SCHEMA_FILE.read_text()
    assert committed == printed_schema(), (
        "graphql/schema.graphql drifted from the code: run `.venv/bin/python -m app.api.schema > "
        "graphql/schema.graphql`"
    )


def test_schema_printer_command_prints_the_committed_schema() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "app.api.schema"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout == SCHEMA_FILE.read_text()


def _first_operation(document: DocumentNode) -> OperationDefinitionNode:
    definition = document.definitions[0]
    assert isinstance(definition, OperationDefinitionNode), definition
    return definition


def _object(schema: GraphQLSchema, name: str) -> GraphQLObjectType:
    found = schema.get_type(name)
    assert isinstance(found, GraphQLObjectType), name
    return found


def test_there_are_queries_mutations_and_subscriptions() -> None:
    kinds = {_first_operation(parse(path.read_text())).operation.value for path in OPERATION_FILES}
    assert kinds == {"query", "mutation", "subscription"}


@pytest.mark.parametrize("path", OPERATION_FILES, ids=lambda p: p.stem)
def test_operation_validates_against_the_committed_schema(path: Path) -> None:
    schema = build_schema(SCHEMA_FILE.read_text())
    document = parse(path.read_text())
    errors = validate(schema, document)
    assert not errors, [e.message for e in errors]
    # One named operation per file, named like the file, so scripts can refer to it by name.
    assert len(document.definitions) == 1
    name = _first_operation(document).name
    assert name is not None and name.value == path.stem


def test_relay_shape() -> None:
    schema = build_schema(SCHEMA_FILE.read_text())
    node = schema.get_type("Node")
    for name in ("Workflow", "Job", "Attempt", "Checkpoint", "Anomaly", "Advice", "AuditEvent"):
        assert node in _object(schema, name).interfaces, name
    assert schema.query_type is not None
    assert "node" in schema.query_type.fields
    for connection in ("WorkflowConnection", "AttemptConnection", "AdviceConnection", "AuditEventConnection"):
        fields = _object(schema, connection).fields
        assert {"edges", "pageInfo", "totalCount"} <= set(fields)
    assert {"hasNextPage", "hasPreviousPage", "startCursor", "endCursor"} == set(_object(schema, "PageInfo").fields)
