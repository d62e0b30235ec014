"""The GraphQL type's plain fields, the REST JSON and the OpenAPI component schema, derived from a read model.

A plain field is a strawberry "basic" field (no resolver) whose attribute is a property of the type reading
the wrapped row: strawberry resolves it with `getattr`, and app.api.execution's compiled plans read it the
same way (`s.<name>`), so both execution paths serve it. The REST JSON is one dict per row (msgspec encodes
it, times included); the OpenAPI schema states each field's JSON type, null where the field may be null.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from operator import attrgetter
from types import GenericAlias
from typing import Any, Optional, TypeVar

import strawberry
from strawberry.annotation import StrawberryAnnotation
from strawberry.scalars import JSON
from strawberry.types.base import get_object_definition
from strawberry.types.field import StrawberryField

from app.api.ids import to_global_id
from app.api.jsonbody import json_time
from app.infra.read_model_fields import Field, GlobalId, ReadModel, Resolved

T = TypeVar("T")

_GRAPHQL: dict[Any, Any] = {str: str, int: int, float: float, bool: bool, dt.datetime: dt.datetime, dict: JSON}
_JSON_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object"}


def _annotation(field: Field) -> Any:
    kind = field.kind
    if isinstance(kind, tuple):
        shown: Any = GenericAlias(list, (_GRAPHQL[kind[1]],))
    else:
        shown = strawberry.ID if kind is GlobalId else _GRAPHQL[kind]
    return Optional[shown] if field.nullable else shown  # noqa: UP045 - a runtime annotation object


def _graphql_read(model: ReadModel, field: Field) -> Callable[[Any], Any]:
    """The property's getter, from the object to the value (a column as it is: attrgetter, read in C)."""
    if field.kind is GlobalId:
        return lambda obj: to_global_id(model.name, obj.row.id)
    if field.source is None or isinstance(field.source, str):
        column = field.source or field.name
        if field.nullable or not (isinstance(field.kind, tuple) or field.kind is dict):
            return attrgetter(f"row.{column}")
    read = field.read()
    return lambda obj: read(obj.row)


def graphql_fields(model: ReadModel) -> Callable[[type[T]], type[T]]:
    """Class decorator (above `@strawberry.type`): add the model's plain fields to the type, in the model's order.

    The type's own fields (resolvers) keep their definitions; those the model names (`Resolved`) take their place
    in its order, the type's others follow it, and fields it inherits that the model does not declare come first.
    """

    def decorate(cls: type[T]) -> type[T]:
        if model.name != cls.__name__:  # the global ids and the docs name the record by its GraphQL type
            raise TypeError(f"read model {model.name} on type {cls.__name__}")
        definition = get_object_definition(cls, strict=True)
        named = {f.name for f in model.fields if not isinstance(f, Field) or f.graphql}
        first = [f for f in definition.fields if f.origin is not cls and f.python_name not in named]
        own = {f.python_name: f for f in definition.fields if f.origin is cls}
        ordered: list[StrawberryField] = []
        for entry in model.fields:
            if isinstance(entry, Resolved):
                ordered.append(own.pop(entry.name))
            elif entry.graphql:
                field = StrawberryField(
                    python_name=entry.name,
                    type_annotation=StrawberryAnnotation(_annotation(entry)),
                    description=entry.description,
                )
                field.origin = cls
                setattr(cls, entry.name, property(_graphql_read(model, entry)))
                ordered.append(field)
        definition.fields = [*first, *ordered, *own.values()]
        return cls

    return decorate


def rest_json(model: ReadModel) -> Callable[[Any], dict[str, Any]]:
    """The REST JSON of a row, times as msgspec writes them (UTC ISO 8601); a field the handler gives is null here,
    in its place, for the handler to set (`{**to_json(row), "key": value}` keeps the order)."""
    plan: list[tuple[str, Callable[[Any], Any]]] = []
    for field in model.plain():
        if field.rest and field.kind is not GlobalId:
            read = _given if field.given else field.read()
            if field.kind is dt.datetime and not field.given:
                read = _timed(read)
            plan.append((field.json_name(), read))

    def to_json(row: Any) -> dict[str, Any]:
        return {key: read(row) for key, read in plan}

    return to_json


def _given(row: Any) -> None:
    return None


def _timed(read: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda row: json_time(read(row))


def json_schema(field: Field) -> dict[str, Any]:
    """The JSON Schema of one REST field."""
    kind = field.kind
    if isinstance(kind, tuple):
        schema: dict[str, Any] = {"type": "array", "items": {"type": _JSON_TYPES[kind[1]]}}
        return {**schema, "type": ["array", "null"]} if field.nullable else schema
    if kind is dt.datetime:
        schema = {"type": "string", "format": "date-time"}
    else:
        schema = {"type": _JSON_TYPES[kind]}
    if field.nullable:
        schema["type"] = [schema["type"], "null"]
    if field.choices is not None:
        schema["enum"] = list(field.choices)
    return schema


def openapi_object(model: ReadModel, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The OpenAPI component of a record's REST JSON (`extra`: properties the handler nests, like a story)."""
    properties = {f.json_name(): json_schema(f) for f in model.plain() if f.rest and f.kind is not GlobalId}
    return strict_object({**properties, **(extra or {})})


def strict_object(properties: dict[str, Any]) -> dict[str, Any]:
    """An object schema with exactly these properties, all required."""
    # additionalProperties false: schemathesis then notices a field the handlers add without documenting it
    return {"type": "object", "required": sorted(properties), "properties": properties, "additionalProperties": False}
