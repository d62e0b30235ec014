"""Secrets never reach the logs: passwords in URLs are masked, query-string tokens are dropped from the access log."""

from __future__ import annotations

import logging
import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from app.domain.fleetwide.notify import (
    mask_url,  # passwords in URLs (`scheme://user:***@host`), shared with the log format
)

__all__ = ["AccessLogFilter", "install_access_log_filter", "mask_url", "redact_target"]

# Query parameters whose values are secrets wherever they appear (OAuth, OIDC, our own API).
SECRET_PARAMETERS = frozenset(
    {
        "access_token",
        "token",
        "id_token",
        "refresh_token",
        "code",
        "state",
        "code_verifier",
        "client_secret",
        "password",
        "secret",
        "authorization",
        "api_key",
        "apikey",
        "session",
    }
)
REDACTED = "REDACTED"
_JWT = re.compile(r"eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*")


def redact_target(target: str) -> str:
    """A request target (path?query) whose secret query values are replaced; JWT-looking text anywhere too."""
    parts = urlsplit(target)
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode(
            [(key, REDACTED if key.lower() in SECRET_PARAMETERS else value) for key, value in pairs], safe="/:"
        )
    cleaned = urlunsplit(("", "", parts.path, query, ""))
    return _JWT.sub(REDACTED, cleaned)


class AccessLogFilter(logging.Filter):
    """For uvicorn's access and WebSocket logs: any argument that is a request target (starts with /) may carry
    a token in its query string."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple):
            record.args = tuple(redact_target(a) if isinstance(a, str) and a.startswith("/") else a for a in args)
        return True


def install_access_log_filter() -> None:
    """Add the filter to uvicorn's access and error loggers (the latter logs WebSocket requests; idempotent)."""
    for name in ("uvicorn.access", "uvicorn.error"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, AccessLogFilter) for f in logger.filters):
            logger.addFilter(AccessLogFilter())
