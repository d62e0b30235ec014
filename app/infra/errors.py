"""Database outages told apart from bugs: one classifier every interface and the worker share.

`database_problem(exc)` walks an exception's cause chain and says whether it means the database is
away (connection refused or lost, server shutting down), busy (SQLite still locked after the busy
timeout) or out of space (disk full) — conditions a client may retry — and never repeats the
driver's text, which can name hosts, ports, SQL and parameters.
"""

from __future__ import annotations

import asyncio
import html
import logging
import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import exc as sa_exc
from starlette.responses import HTMLResponse, JSONResponse, Response

T = TypeVar("T")

DATABASE_UNAVAILABLE = "DATABASE_UNAVAILABLE"
DATABASE_BUSY = "DATABASE_BUSY"
STORAGE_FULL = "STORAGE_FULL"

_MESSAGES = {
    DATABASE_UNAVAILABLE: "The database is not reachable right now; retry in a few seconds.",
    DATABASE_BUSY: "The database is busy right now; retry in a few seconds.",
    STORAGE_FULL: "The database cannot store more data: its disk is full. An operator must free space.",
}
RETRY_AFTER_SECONDS = 5


@dataclass(frozen=True)
class DatabaseProblem:
    """A classified database failure: its code, a safe message, and the seconds a client should wait."""

    code: str
    kind: str  # the exception class that showed it, for logs

    @property
    def message(self) -> str:
        return _MESSAGES[self.code]

    @property
    def retry_after(self) -> int:
        return RETRY_AFTER_SECONDS


class DatabaseUnavailable(Exception):
    """Raised where a database problem is turned into an answer (503)."""

    def __init__(self, problem: DatabaseProblem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen and len(seen) < 20:
        seen.append(current)
        orig = getattr(current, "orig", None)
        current = orig if isinstance(orig, BaseException) else (current.__cause__ or current.__context__)
    return seen


def _asyncpg_connection_error(exc: BaseException) -> bool:
    try:
        from asyncpg import exceptions as pg
    except ImportError:  # SQLite-only installation
        return False
    return isinstance(
        exc,
        pg.PostgresConnectionError
        | pg.ConnectionDoesNotExistError
        | pg.InterfaceError
        | pg.AdminShutdownError
        | pg.CrashShutdownError
        | pg.CannotConnectNowError
        | pg.TooManyConnectionsError,
    )


def database_problem(exc: BaseException) -> DatabaseProblem | None:
    """What kind of database outage ``exc`` shows, or None when it is not one (a bug, bad input)."""
    if isinstance(exc, DatabaseUnavailable):
        return exc.problem
    for item in _chain(exc):
        kind = type(item).__name__
        text = str(item).lower()
        if isinstance(item, sqlite3.OperationalError | sa_exc.OperationalError):
            if "disk is full" in text or "database or disk is full" in text or "no space" in text:
                return DatabaseProblem(STORAGE_FULL, kind)
            if "locked" in text or "busy" in text:
                return DatabaseProblem(DATABASE_BUSY, kind)
        if isinstance(item, OSError) and getattr(item, "errno", None) == 28:  # ENOSPC
            return DatabaseProblem(STORAGE_FULL, kind)
        if isinstance(item, sa_exc.DBAPIError) and item.connection_invalidated:
            return DatabaseProblem(DATABASE_UNAVAILABLE, kind)
        if isinstance(item, sa_exc.DisconnectionError | sa_exc.TimeoutError | sa_exc.InterfaceError):
            return DatabaseProblem(DATABASE_UNAVAILABLE, kind)
        if isinstance(item, ConnectionError | TimeoutError) or _asyncpg_connection_error(item):
            return DatabaseProblem(DATABASE_UNAVAILABLE, kind)
        if isinstance(item, OSError) and getattr(item, "errno", None) in {111, 113, 101, 104, 110}:
            return DatabaseProblem(DATABASE_UNAVAILABLE, kind)
    for item in _chain(exc):
        if isinstance(item, sa_exc.OperationalError):
            return DatabaseProblem(DATABASE_UNAVAILABLE, type(item).__name__)
    return None


def database_error_text(exc: BaseException) -> str:
    """A log-safe one-liner for a database failure (the class and our code, no driver text)."""
    problem = database_problem(exc)
    if problem is None:
        return type(exc).__name__
    return f"{problem.code} ({problem.kind})"


def outage_response(problem: DatabaseProblem, path: str) -> Response:
    """The 503 answer for ``path``: REST's error shape, GraphQL's errors list, or an HTML page for the dashboard."""
    headers = {"Retry-After": str(problem.retry_after), "Cache-Control": "no-store"}
    if path.startswith("/dashboard"):
        body = (
            "<!doctype html><html lang=en><head><meta charset=utf-8><title>Database unavailable</title></head>"
            f"<body><h1>Database unavailable</h1><p>{html.escape(problem.message)}</p>"
            f"<p>Code: <code>{problem.code}</code>. Reload this page in a few seconds.</p>"
            "</body></html>"
        )
        return HTMLResponse(body, status_code=503, headers=headers)
    if path.startswith("/graphql"):
        error = {"message": problem.message, "extensions": {"code": problem.code}}
        return JSONResponse({"errors": [error]}, status_code=503, headers=headers)
    return JSONResponse({"error": {"code": problem.code, "message": problem.message}}, status_code=503, headers=headers)


_UNFINISHED: set[asyncio.Future[Any]] = set()  # reads whose reader left: kept referenced until they end


async def _to_the_end(operation: Callable[[], Awaitable[T]]) -> T:
    """`await operation()`, except that when the caller is cancelled meanwhile (a browser closed its live stream, a
    WebSocket went away) the operation still runs to its end: its database session then closes and returns its
    connection normally, instead of being torn down mid-rollback (which SQLAlchemy logs as an ERROR traceback)."""
    task = asyncio.ensure_future(operation())
    _UNFINISHED.add(task)
    task.add_done_callback(_forget)
    return await asyncio.shield(task)


def _forget(task: asyncio.Future[Any]) -> None:
    _UNFINISHED.discard(task)
    if not task.cancelled():
        task.exception()  # retrieved: a read that failed after its reader left concerns no one


async def retrying(
    operation: Callable[[], Awaitable[T]], *, what: str, logger: logging.Logger, max_delay: float = 5.0
) -> T:
    """Run ``operation`` until it succeeds, waiting (0.25 s doubling to ``max_delay``) while the database is away.

    For long-lived readers (live streams): they keep their position and go on once the database is back.
    Anything that is not a database problem is raised at once.
    """
    delay = 0.25
    failures = 0
    while True:
        try:
            return await _to_the_end(operation)
        except Exception as exc:
            if database_problem(exc) is None:
                raise
            failures += 1
            if failures == 1:
                logger.warning("%s: %s; retrying until the database answers", what, database_error_text(exc))
            await asyncio.sleep(delay)
            delay = min(max_delay, delay * 2)
