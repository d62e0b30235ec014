"""The fast execution path gives exactly graphql-core's answer: the same data, and the same errors (message, path)
when a plain field breaks its type."""

from __future__ import annotations

import enum
from typing import Any

import strawberry

from app.api import execution
from app.api.execution import LeafFastExecutionContext


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
