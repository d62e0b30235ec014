"""GraphQL errors with a machine-readable `extensions.code`, and the expected ones that are not logged."""

from __future__ import annotations

from typing import Any

from graphql import GraphQLError

BAD_USER_INPUT = "BAD_USER_INPUT"
NOT_FOUND = "NOT_FOUND"
FORBIDDEN = "FORBIDDEN"
UNAUTHENTICATED = "UNAUTHENTICATED"
LIMIT_EXCEEDED = "LIMIT_EXCEEDED"
PARSE_FAILED = "GRAPHQL_PARSE_FAILED"  # the document is not GraphQL
VALIDATION_FAILED = "GRAPHQL_VALIDATION_FAILED"  # it is, but does not fit the schema or the spec's rules
EXPECTED_CODES = frozenset(
    {BAD_USER_INPUT, NOT_FOUND, FORBIDDEN, UNAUTHENTICATED, LIMIT_EXCEEDED, PARSE_FAILED, VALIDATION_FAILED}
)


class ApiError(GraphQLError):
    """An error the client caused or may act on; `code` goes to `extensions.code`."""

    def __init__(self, message: str, code: str, **extensions: Any) -> None:
        super().__init__(message, extensions={"code": code, **extensions})
        self.code = code


def bad_input(message: str) -> ApiError:
    return ApiError(message, BAD_USER_INPUT)


def not_found(message: str) -> ApiError:
    return ApiError(message, NOT_FOUND)


def forbidden(message: str) -> ApiError:
    return ApiError(message, FORBIDDEN)


def is_expected(error: GraphQLError) -> bool:
    """True for client errors (bad input, limits, auth) that are answered, not logged as failures."""
    code = (error.extensions or {}).get("code")
    original = error.original_error
    if code is None and original is not None:
        code = (getattr(original, "extensions", None) or {}).get("code")
    return code in EXPECTED_CODES or original is None
