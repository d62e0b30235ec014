"""Secrets never reach the logs: passwords in URLs are masked, query-string tokens are dropped from the access log."""

from __future__ import annotations

import logging
import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

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
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^:/@\s]*):(?P<password>[^@/\s]*)@")
_JWT = re.compile(r"eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*")


def mask_url(url: str) -> str:
    """The URL with any password replaced by ***: `postgresql://app:***@db/recovery`."""
    return _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:***@", url)


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
    """For uvicorn's access log: its third argument is the request target, which may carry a token."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            record.args = (*args[:2], redact_target(args[2]), *args[3:])
        return True


def install_access_log_filter() -> None:
    """Add the filter to uvicorn's access logger (idempotent)."""
    logger = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, AccessLogFilter) for f in logger.filters):
        logger.addFilter(AccessLogFilter())
