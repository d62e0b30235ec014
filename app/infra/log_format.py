"""Structured logs (RECOVERY_LOG_FORMAT=text|json): every line names its component and, where it applies, the
cluster, job, attempt, Advice and generation (bound with `log_context`), with passwords in URLs masked."""

from __future__ import annotations

import contextvars
import datetime as dt
import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from app.domain.fleetwide.notify import mask_url

FIELDS = ("cluster", "job_id", "attempt_index", "advice_id", "generation")
_context: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("recovery_log_context", default=None)
_defaults: dict[str, Any] = {}


@contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Add fields (component, job_id, attempt_index, advice_id, generation ...) to every line logged inside."""
    token = _context.set({**(_context.get() or {}), **{k: v for k, v in fields.items() if v is not None}})
    try:
        yield
    finally:
        _context.reset(token)


def bind(**fields: Any) -> None:
    """Add fields for the rest of the enclosing `log_context` block (or task)."""
    _context.set({**(_context.get() or {}), **{k: v for k, v in fields.items() if v is not None}})


def set_cluster(cluster: str) -> None:
    """The cluster named on lines logged outside any `log_context` that says otherwise (the process's own)."""
    _defaults["cluster"] = cluster


def component_of(record: logging.LogRecord) -> str:
    """`recovery.controller` -> controller; other libraries keep their top-level name (uvicorn, alembic)."""
    name = record.name
    if name.startswith("recovery."):
        return name.split(".", 2)[1]
    return "main" if name == "recovery" else name.split(".", 1)[0]


class ContextFilter(logging.Filter):
    """Puts the component and the bound context on each record (`recovery_component`, `context`), masking secrets."""

    def filter(self, record: logging.LogRecord) -> bool:
        bound = {**_defaults, **(_context.get() or {})}
        record.recovery_component = bound.pop("component", None) or component_of(record)
        record.context = {k: bound[k] for k in FIELDS if k in bound}
        message = record.getMessage()
        masked = mask_url(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


class TextFormatter(logging.Formatter):
    """`time LEVEL component: message [cluster=.. job_id=..]`."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(recovery_component)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        context = getattr(record, "context", {})
        if context:
            first, sep, rest = line.partition("\n")
            line = first + " [" + " ".join(f"{k}={v}" for k, v in context.items()) + "]" + sep + rest
        return mask_url(line)


class JsonFormatter(logging.Formatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "component": getattr(record, "recovery_component", component_of(record)),
            "logger": record.name,
            "message": record.getMessage(),
            **getattr(record, "context", {}),
        }
        if record.exc_info:
            entry["exception"] = mask_url(self.formatException(record.exc_info))
        return json.dumps(entry, default=str)


class _Handler(logging.StreamHandler):
    """The handler configure() installs (so that a second call replaces it and leaves others alone)."""


QUIET_LIBRARIES = ("watchfiles", "httpx", "httpcore", "websockets", "asyncio", "multipart", "python_multipart")


def configure(
    *, fmt: str = "text", verbose: bool = False, cluster: str | None = None, stream: TextIO | None = None
) -> logging.Handler:
    """Install the one stderr handler every logger (ours, uvicorn's, alembic's) writes through."""
    _defaults.clear()
    if cluster:
        _defaults["cluster"] = cluster
    handler = _Handler(stream or sys.stderr)
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        if isinstance(old, _Handler):
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    logging.getLogger("sqlalchemy.engine").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    # Libraries' INFO lines (watchfiles logs one per file change) bury our own; -v brings them back.
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(logging.NOTSET if verbose else logging.WARNING)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True
    return handler
