"""What GraphQL clients see of errors: documented codes as they are, anything unexpected as a safe message with an
error id (the full error, with its traceback, is logged under that id); and spec validation before our limits."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator
from typing import Any

from strawberry.extensions import MaskErrors, SchemaExtension
from strawberry.types.graphql import OperationType

from app.api.errors import bad_input, is_expected
from graphql import GraphQLError, specified_rules, validate

log = logging.getLogger("recovery.api")

INTERNAL = "INTERNAL_SERVER_ERROR"
_ID_ATTRIBUTE = "_recovery_error_id"


def error_id(error: GraphQLError) -> str:
    """The id under which an unexpected error was logged (logging it the first time it is asked for)."""
    existing = getattr(error, _ID_ATTRIBUTE, None)
    if isinstance(existing, str):
        return existing
    eid = secrets.token_hex(6)
    setattr(error, _ID_ATTRIBUTE, eid)
    original = error.original_error
    log.error(
        "GraphQL error id %s at path %s: %s",
        eid,
        ".".join(str(p) for p in error.path or []) or "-",
        error.message,
        exc_info=(type(original), original, original.__traceback__) if original is not None else None,
    )
    return eid


def should_mask(error: GraphQLError) -> bool:
    """Unexpected errors: raised while resolving (they have a path) or by a subscription's source. Validation
    and variable errors (no path, raised by graphql-core or strawberry as GraphQLErrors) are kept."""
    if is_expected(error):
        return False
    return error.path is not None or not isinstance(error.original_error, GraphQLError)


def masked(error: GraphQLError) -> GraphQLError:
    """The error as a client may see it: unchanged when expected, else the safe message with its error id."""
    if not should_mask(error):
        return error
    eid = error_id(error)
    return GraphQLError(
        message=f"internal error (error id {eid}); the operator can find the details in the service log",
        nodes=error.nodes,
        source=error.source,
        positions=error.positions,
        path=error.path,
        original_error=None,
        extensions={"code": INTERNAL, "errorId": eid},
    )


class MaskUnexpectedErrors(MaskErrors):
    """Replaces unexpected errors (SQL, driver and programming errors) by "internal error (error id …)"."""

    def __init__(self) -> None:
        super().__init__(should_mask_error=should_mask)

    def anonymise_error(self, error: GraphQLError) -> GraphQLError:
        return masked(error)


class SpecValidationFirst(SchemaExtension):
    """Runs graphql-core's own validation rules before the limit rules, so a document with (say) an undefined
    fragment gets the spec's message ("Unknown fragment 'F'.") rather than a limiter's crash."""

    def on_validate(self) -> Iterator[None]:
        context = self.execution_context
        document = context.graphql_document
        if document is not None and context.pre_execution_errors is None:
            errors = validate(context.schema._schema, document, specified_rules)
            if errors:
                context.pre_execution_errors = errors
            elif _subscription_over_http(context):
                context.pre_execution_errors = [
                    bad_input("subscriptions are served over WebSocket (graphql-transport-ws) at /graphql")
                ]
        yield


def _subscription_over_http(context: Any) -> bool:
    try:
        operation_type = context.operation_type
    except RuntimeError:
        return False  # no single operation: validation has said why
    api_context = context.context
    return operation_type is OperationType.SUBSCRIPTION and not getattr(api_context, "websocket", False)
