"""What a read model is made of: the fields of one record as the API shows it, declared once by the record's area.

app.api.derive builds the GraphQL type's plain fields, the REST JSON and the OpenAPI component schema from
such a list (docs/read-models.md). A field reads a column of the row (`source` a name) or derives its value
from the row (`source` a function of it, which also decides what a null column gives); `Resolved` names a
GraphQL field whose resolver the API type writes itself (it needs the request: loaders, settings), so the list
also gives the type's field order.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

JSON = dict  # a JSON value (GraphQL's JSON scalar; REST "object": a REST field of this kind holds an object)
Kind = type | tuple[type, type]  # str, int, float, bool, dt.datetime, JSON, or (list, item type)
Source = str | Callable[[Any], Any]


class GlobalId:
    """Kind of the record's opaque global id (GraphQL's ID, made from the row's id and the record's name)."""


class Given:
    """Source of a REST field the handler supplies (it needs other rows or the settings): null in its place until
    the handler sets it."""


SCALARS: tuple[type, ...] = (str, int, float, bool, dt.datetime, JSON, GlobalId)


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a record: GraphQL and REST name it `name` in camelCase (REST as `rest_name` when given)."""

    name: str
    kind: Kind
    nullable: bool = False
    description: str | None = None
    source: Source | type[Given] | None = None  # None: the column of the same name
    graphql: bool = True
    rest: bool = True
    rest_name: str | None = None
    choices: Sequence[str] | None = None  # the values the field takes (an OpenAPI enum)

    def __post_init__(self) -> None:
        item = self.kind[1] if isinstance(self.kind, tuple) else self.kind
        if item not in SCALARS or (isinstance(self.kind, tuple) and self.kind[0] is not list):
            raise TypeError(f"{self.name}: unsupported kind {self.kind!r}")

    def read(self) -> Callable[[Any], Any]:
        """The value from a row: a derivation as it is; a list or JSON column that is not nullable reads an empty
        one for null."""
        source = self.source if self.source is not None else self.name
        if isinstance(source, type):  # Given
            raise TypeError(f"{self.name}: the handler gives it; it is not read from the row")
        if not isinstance(source, str):
            return source
        get = attrgetter(source)
        if self.nullable:
            return get
        if isinstance(self.kind, tuple):
            return lambda row: list(get(row) or ())
        if self.kind is JSON:
            return lambda row: get(row) or {}
        return get

    @property
    def given(self) -> bool:
        """The REST handler supplies the value."""
        return self.source is Given

    def json_name(self) -> str:
        """The key of the REST JSON."""
        return self.rest_name or camel(self.name)


@dataclass(frozen=True, slots=True)
class Resolved:
    """A GraphQL field the API type resolves itself (named here for its place in the type)."""

    name: str


@dataclass(frozen=True, slots=True)
class ReadModel:
    """One record as the API shows it: its fields in order (GraphQL type, REST object, OpenAPI component)."""

    name: str
    fields: tuple[Field | Resolved, ...]

    def plain(self) -> tuple[Field, ...]:
        """The fields read from the row."""
        return tuple(f for f in self.fields if isinstance(f, Field))


def camel(name: str) -> str:
    """snake_case as camelCase (what strawberry does to a field's name)."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)
