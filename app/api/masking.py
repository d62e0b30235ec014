"""What GraphQL clients see of errors: documented codes as they are, anything unexpected as a safe message with an
error id (the full error, with its traceback, is logged under that id); and spec validation before our limits."""

from __future__ import annotations

import logging
import secrets
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

from graphql.validation.validate import ValidationAbortedError
from strawberry.extensions import MaskErrors, SchemaExtension
from strawberry.types.graphql import OperationType

from app.api.errors import LIMIT_EXCEEDED, PARSE_FAILED, VALIDATION_FAILED, bad_input, is_expected
from graphql import GraphQLError, OperationDefinitionNode, specified_rules, validate

log = logging.getLogger("recovery.api")

INTERNAL = "INTERNAL_SERVER_ERROR"
MULTIPLE_OPERATIONS = "Must provide operation name if query contains multiple operations."
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


# Documents that parsed and validated cleanly, by their text: a client (the dashboard, a script) sends the same
# few operations over and over, and parsing plus validating them cost more than executing a page. Bounded (LRU);
# only valid documents are kept (errors are computed afresh, so a cached error object is never shared).
DOCUMENT_CACHE_SIZE = 256
MAX_CACHED_QUERY_LENGTH = 64 * 1024
_documents: OrderedDict[str, Any] = OrderedDict()


def _cached_document(query: str | None) -> Any:
    if not query:
        return None
    document = _documents.get(query)
    if document is not None:
        _documents.move_to_end(query)
    return document


def _remember_document(query: str | None, document: Any) -> None:
    if not query or document is None or len(query) > MAX_CACHED_QUERY_LENGTH:
        return
    _documents[query] = document
    _documents.move_to_end(query)
    while len(_documents) > DOCUMENT_CACHE_SIZE:
        _documents.popitem(last=False)


class SpecValidationFirst(SchemaExtension):
    """Runs graphql-core's own validation rules before the limit rules, so a document with (say) an undefined
    fragment gets the spec's message ("Unknown fragment 'F'.") rather than a limiter's crash.

    A document text that already parsed and passed every rule (spec, depth, aliases, tokens) is neither parsed nor
    validated again: the checks that depend on the request (the variable-dependent cost limit, subscriptions over
    HTTP) still run each time."""

    def on_parse(self) -> Iterator[None]:
        context = self.execution_context
        if context.graphql_document is None:
            context.graphql_document = _cached_document(context.query)
        yield
        for error in context.pre_execution_errors or ():
            # "Document contains more than 5000 tokens. Parsing aborted." is our token limit, the rest syntax
            if "Parsing aborted" in error.message:
                _set_code(error, LIMIT_EXCEEDED, limit="tokens")
            else:
                _set_code(error, PARSE_FAILED)

    def on_validate(self) -> Iterator[None]:
        context = self.execution_context
        document = context.graphql_document
        cached = document is not None and _cached_document(context.query) is document
        if document is not None and context.pre_execution_errors is None:
            errors = [] if cached else validate(context.schema._schema, document, specified_rules)
            if errors:
                context.pre_execution_errors = errors
            elif _several_operations_unnamed(context):
                context.pre_execution_errors = [bad_input(MULTIPLE_OPERATIONS)]
            elif _subscription_over_http(context):
                context.pre_execution_errors = [
                    bad_input("subscriptions are served over WebSocket (graphql-transport-ws) at /graphql")
                ]
            elif cached:
                context.pre_execution_errors = []  # strawberry then skips its own (full) validation
        yield
        for error in context.pre_execution_errors or ():
            limit = _limit_of(error)
            if limit is not None:
                _set_code(error, LIMIT_EXCEEDED, limit=limit)
            else:
                _set_code(error, VALIDATION_FAILED)
        if not cached and document is not None and context.pre_execution_errors == []:
            _remember_document(context.query, document)


def _limit_of(error: GraphQLError) -> str | None:
    """Which limit a validation error reports, or None for a plain validation error."""
    # graphql-core stops validating a document that costs too much to check: 1,000 repeated fields
    if isinstance(error, ValidationAbortedError) or error.message.endswith("Validation aborted."):
        return "validation"
    if "exceeds maximum operation depth" in error.message:  # strawberry's depth limiter
        return "depth"
    if "aliases found" in error.message:  # strawberry's alias limiter
        return "aliases"
    return None


def _set_code(error: GraphQLError, code: str, **extensions: Any) -> None:
    """Give an error of the document (no path) that has no `extensions.code` this code."""
    if error.path is None and not (error.extensions or {}).get("code"):
        error.extensions = {**(error.extensions or {}), "code": code, **extensions}


def _several_operations_unnamed(context: Any) -> bool:
    """A document with more than one operation and no operationName: the GraphQL spec's request error (strawberry
    would otherwise run the first one)."""
    if getattr(context, "_provided_operation_name", None) is not None:
        return False
    document = context.graphql_document
    return sum(isinstance(d, OperationDefinitionNode) for d in document.definitions) > 1


def _subscription_over_http(context: Any) -> bool:
    try:
        operation_type = context.operation_type
    except RuntimeError:
        return False  # no single operation: validation has said why
    api_context = context.context
    return operation_type is OperationType.SUBSCRIPTION and not getattr(api_context, "websocket", False)
