"""The GraphQL schema; `python -m app.api.schema` prints it (committed as graphql/schema.graphql)."""

from __future__ import annotations

import logging
from typing import Any

import strawberry
from strawberry.schema.config import StrawberryConfig
from strawberry.schema.name_converter import NameConverter

from app.api.execution import LeafFastExecutionContext
from app.api.limits import limit_extensions
from app.api.masking import error_id, should_mask
from app.api.mutation import Mutation
from app.api.outage import DatabaseOutageErrors
from app.api.query import Query
from app.api.subscription import Subscription
from app.infra.errors import database_error_text, database_problem
from graphql import GraphQLError

log = logging.getLogger("recovery.api")


class RecoverySchema(strawberry.Schema):
    """Logs only unexpected errors raised while resolving: bad input, auth, limit and variable errors are answers."""

    def process_errors(self, errors: list[GraphQLError], execution_context: Any = None) -> None:
        for error in errors:
            # A database outage is answered with DATABASE_UNAVAILABLE (app/api/outage.py) and logged
            # as a one-line warning, not as a traceback per failed field.
            if _outage(error):
                continue
            if should_mask(error):
                error_id(error)  # logged with its traceback under the id the client is shown


def _outage(error: GraphQLError) -> bool:
    if error.original_error is None or database_problem(error.original_error) is None:
        return False
    log.warning("GraphQL: %s", database_error_text(error.original_error))
    return True


class CachedNameConverter(NameConverter):
    """Strawberry's GraphQL names, each converted once: argument conversion asks for every input field's name on
    every request (the names are the schema's own, a fixed set)."""

    def __init__(self) -> None:
        super().__init__()
        self._converted: dict[str, str] = {}

    def apply_naming_config(self, name: str) -> str:
        converted = self._converted.get(name)
        if converted is None:
            converted = self._converted[name] = super().apply_naming_config(name)
        return converted


def build_schema() -> RecoverySchema:
    """The schema with its limits."""
    return RecoverySchema(
        query=Query,
        mutation=Mutation,
        subscription=Subscription,
        extensions=[*limit_extensions(), DatabaseOutageErrors],
        execution_context_class=LeafFastExecutionContext,
        config=StrawberryConfig(name_converter=CachedNameConverter()),
    )


schema = build_schema()


def printed_schema() -> str:
    """The SDL as committed in graphql/schema.graphql."""
    return schema.as_str().rstrip() + "\n"


if __name__ == "__main__":
    print(printed_schema(), end="")
