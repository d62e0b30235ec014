"""A read model gives the GraphQL type's plain fields (served alike by strawberry and the fast executor), the REST JSON
and the OpenAPI component; the API's records all come from theirs."""

from __future__ import annotations

import datetime as dt
from collections import namedtuple
from typing import Any

import strawberry

from app.advice import read_model as advice_models
from app.api import execution
from app.api.derive import graphql_fields, openapi_object, rest_json
from app.api.execution import LeafFastExecutionContext
from app.api.openapi import openapi_document
from app.api.schema import schema
from app.audit import read_model as audit_models
from app.evidence import read_model as evidence_models
from app.fleet import read_model as fleet_models
from app.infra.read_model_fields import Field, Given, ReadModel, Resolved
from app.jobs import read_model as job_models
from app.leases import read_model as lease_models

Row = namedtuple("Row", "id title size tags made note")
WHEN = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
THING = ReadModel(
    "Thing",
    (
        Field("name", str, source="title", description="What it is called."),
        Resolved("shout"),
        Field("size", int, nullable=True),
        Field("tags", (list, str)),
        Field("made", dt.datetime),
        Field("twice", int, source=lambda row: row.size * 2 if row.size is not None else 0, rest=False),
        Field("note", str, nullable=True, graphql=False, source=Given),
    ),
)


@graphql_fields(THING)
@strawberry.type
class Thing:
    row: strawberry.Private[Any]

    @strawberry.field
    def shout(self) -> str:
        return self.row.title.upper()


@strawberry.type
class Query:
    @strawberry.field
    def things(self) -> list[Thing]:
        return [
            Thing(row=Row(i, f"t{i}", i if i % 2 else None, None if i == 2 else ["a"], WHEN, None)) for i in range(4)
        ]


def test_the_type_follows_the_model_on_both_execution_paths(monkeypatch: Any) -> None:
    plain = strawberry.Schema(query=Query)
    fast = strawberry.Schema(query=Query, execution_context_class=LeafFastExecutionContext)
    taken: list[int] = []
    original = LeafFastExecutionContext._execute_plan

    def counting(self: Any, plan: Any, source: Any) -> Any:
        taken.append(1)
        return original(self, plan, source)

    monkeypatch.setattr(LeafFastExecutionContext, "_execute_plan", counting)
    sdl = str(plain)
    assert '"""What it is called."""\n  name: String!\n  shout: String!\n  size: Int\n  tags: [String!]!' in sdl
    assert "note" not in sdl  # REST only
    query = "{ things { name size tags made twice } }"
    expected, got = plain.execute_sync(query), fast.execute_sync(query)
    assert expected.errors is None and got.errors is None and got.data == expected.data
    assert got.data is not None
    assert got.data["things"][2] == {"name": "t2", "size": None, "tags": [], "made": WHEN.isoformat(), "twice": 0}
    assert got.data["things"][3]["twice"] == 6
    assert taken  # plain fields of a read model are served by the fast executor
    assert execution._BASIC == "_get_basic_result"


def test_rest_json_and_openapi_come_from_the_same_fields() -> None:
    to_json = rest_json(THING)
    body = to_json(Row(1, "t1", 1, None, WHEN, "x"))
    assert body == {"name": "t1", "size": 1, "tags": [], "made": WHEN, "note": None}  # msgspec writes the time
    component = openapi_object(THING)
    assert component["required"] == sorted(body) and component["additionalProperties"] is False
    assert component["properties"]["size"] == {"type": ["integer", "null"]}
    assert component["properties"]["made"] == {"type": "string", "format": "date-time"}
    assert component["properties"]["tags"] == {"type": "array", "items": {"type": "string"}}


def test_every_record_of_the_api_is_derived_from_its_read_model() -> None:
    types = schema.as_str()
    components = openapi_document()["components"]["schemas"]
    for model, component in [
        (job_models.ATTEMPT, components["Attempt"]),
        (job_models.WORKFLOW, components["Workflow"]),
        (advice_models.ADVICE, components["Advice"]),
        (advice_models.SCHEDULER_ACTION, components["Milestone"]),
        (audit_models.AUDIT_EVENT, components["AuditEvent"]),
        (lease_models.CLUSTER, components["ClusterOverview"]),
        (fleet_models.COMPUTE_NODE, components["ComputeNode"]),
    ]:
        rest = {f.json_name() for f in model.plain() if f.rest}
        # composed beside the record: its story, its outcome, its stack capture (a record of its own table)
        composed = {"story", "outcome", "stackCapture"}
        assert set(component["properties"]) - rest <= composed and rest <= set(component["properties"]), model.name
    for model in (
        job_models.JOB,
        job_models.ATTEMPT,
        job_models.WORKFLOW,
        advice_models.ADVICE,
        advice_models.RECONCILIATION,
        advice_models.SCHEDULER_ACTION,
        audit_models.AUDIT_EVENT,
        evidence_models.ANOMALY,
        evidence_models.CHECKPOINT,
        lease_models.LEASE,
        lease_models.CLUSTER,
        fleet_models.COMPUTE_NODE,
        fleet_models.NODE_EVIDENCE,
    ):
        block = types.split(f"type {model.name} ", 1)[1].split("\n}", 1)[0]
        for field in model.plain():
            if field.graphql:
                camel = field.name.split("_")[0] + "".join(p.title() for p in field.name.split("_")[1:])
                assert f"  {camel}: " in block, (model.name, field.name)
