"""The fast execution path gives exactly graphql-core's answer: the same data, and the same errors (message, path)
when a plain field breaks its type."""

from __future__ import annotations

import enum
from types import SimpleNamespace
from typing import Any

import strawberry

from app.api import execution
from app.api.execution import LeafFastExecutionContext
from app.api.masking import SpecValidationFirst
from app.infra.config import Settings


@strawberry.enum
class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@strawberry.type
class Leaf:
    name: str
    size: int | None
    colour: Colour


@strawberry.type
class Edge:
    cursor: str
    node: Leaf


@strawberry.type
class Page:
    edges: list[Edge]
    nodes: list[Leaf]
    total: int | None = None


@strawberry.type
class Query:
    @strawberry.field
    def page(self, broken: bool = False) -> Page:
        leaves = [
            Leaf(name=f"n{i}", size=i if i % 2 else None, colour=Colour.RED if i % 3 else Colour.BLUE) for i in range(5)
        ]
        if broken:
            leaves[3].name = None  # type: ignore[assignment]  # a non-null field that returns null
        return Page(edges=[Edge(cursor=f"c{i}", node=leaf) for i, leaf in enumerate(leaves)], nodes=leaves)


QUERY = (
    "query($b: Boolean!) { page(broken: $b) { total edges { cursor node { name size colour } } "
    "nodes { colour name } } }"
)


def _run(schema: strawberry.Schema, broken: bool) -> Any:
    return schema.execute_sync(QUERY, variable_values={"b": broken})


def test_fast_path_answers_like_graphql_core_and_is_taken(monkeypatch: Any) -> None:
    plain = strawberry.Schema(query=Query)
    fast = strawberry.Schema(query=Query, execution_context_class=LeafFastExecutionContext)
    taken: list[int] = []
    original = LeafFastExecutionContext._execute_plan

    def counting(self: Any, plan: Any, source: Any) -> Any:
        taken.append(1)
        return original(self, plan, source)

    monkeypatch.setattr(LeafFastExecutionContext, "_execute_plan", counting)
    expected, got = _run(plain, False), _run(fast, False)
    assert got.errors is None and got.data == expected.data
    assert got.data["page"]["edges"][1]["node"] == {"name": "n1", "size": 1, "colour": "RED"}
    assert taken  # the page was served by the fast path

    expected, got = _run(plain, True), _run(fast, True)
    assert expected.errors and got.errors
    assert [(e.message, e.path) for e in got.errors] == [(e.message, e.path) for e in expected.errors]
    assert got.data == expected.data
    assert execution._BASIC == "_get_basic_result"


def test_plans_are_shared_across_requests_and_follow_the_variables(monkeypatch: Any) -> None:
    plain = strawberry.Schema(query=Query)
    # With the API's document cache (app/api/masking.py), as in the app: the same text is the same document.
    fast = strawberry.Schema(
        query=Query, execution_context_class=LeafFastExecutionContext, extensions=[SpecValidationFirst]
    )
    planned: list[int] = []
    original = execution._plan_of

    def counting(*args: Any) -> Any:
        planned.append(1)
        return original(*args)

    monkeypatch.setattr(execution, "_plan_of", counting)
    query = "query($s: Boolean!) { page { edges { cursor node { name size @include(if: $s) colour } } } }"
    answers = []
    plans_made = []
    for shown in (False, True, False, True):
        expected = plain.execute_sync(query, variable_values={"s": shown})
        got = fast.execute_sync(query, variable_values={"s": shown})
        assert got.errors is None and got.data == expected.data
        assert got.data is not None
        answers.append(got.data["page"]["edges"][1]["node"])
        plans_made.append(len(planned))
    assert answers[0] == answers[2] == {"name": "n1", "colour": "RED"}
    assert answers[1] == answers[3] == {"name": "n1", "size": 1, "colour": "RED"}
    assert plans_made[0] > 0 and plans_made[1] > plans_made[0]  # the included field makes other plans
    assert plans_made[3] == plans_made[1]  # the repeated requests were served by the plans of the first two


def test_recovery_fast_paths_off_leaves_every_field_to_graphql_core(monkeypatch: Any) -> None:
    """The switch is read from the request's context (ApiContext.app.settings): off, no plan runs; on, they do."""
    fast = strawberry.Schema(query=Query, execution_context_class=LeafFastExecutionContext)
    taken: list[int] = []
    original = LeafFastExecutionContext._execute_plan

    def counting(self: Any, plan: Any, source: Any) -> Any:
        taken.append(1)
        return original(self, plan, source)

    monkeypatch.setattr(LeafFastExecutionContext, "_execute_plan", counting)
    answers = {}
    for on in (False, True):
        context = SimpleNamespace(app=SimpleNamespace(settings=Settings.build(data_dir="/nowhere", fast_paths=on)))
        taken.clear()
        answers[on] = fast.execute_sync(QUERY, variable_values={"b": False}, context_value=context)
        assert bool(taken) is on
    assert answers[False].errors is None and answers[False].data == answers[True].data
