"""GraphQL answers while the database is away: a `DATABASE_UNAVAILABLE` (or BUSY / STORAGE_FULL) error, HTTP 503.

Without this, a resolver's driver error reached the client as `data.job: null` with the raw text
(host, port, SQL). The shared classifier (app/infra/errors.py) decides what counts as an outage.
"""

from __future__ import annotations

from collections.abc import Iterator

from strawberry.extensions import SchemaExtension

from app.infra.errors import DatabaseProblem, database_problem
from graphql import GraphQLError


class DatabaseOutageErrors(SchemaExtension):
    """Replaces errors caused by a database outage with a clear coded error and sets the HTTP status to 503."""

    def on_execute(self) -> Iterator[None]:
        yield
        result = self.execution_context.result
        errors = getattr(result, "errors", None)
        if not errors:
            return
        found: DatabaseProblem | None = None
        replaced: list[GraphQLError] = []
        for error in errors:
            problem = database_problem(error.original_error) if error.original_error is not None else None
            if problem is None:
                replaced.append(error)
                continue
            found = problem
            replaced.append(
                GraphQLError(problem.message, nodes=error.nodes, path=error.path, extensions={"code": problem.code})
            )
        if found is None:
            return
        errors[:] = replaced  # in place: the executor returns this result object
        response = getattr(self.execution_context.context, "response", None)
        if response is not None and not getattr(self.execution_context.context, "websocket", False):
            response.status_code = 503
            response.headers["Retry-After"] = str(found.retry_after)
