"""Checks at the HTTP edge, before any route: Host allowlist in dev mode, Origin on state-changing requests,
URLs that are not text, and JSON bodies that cannot be parsed safely. Each refusal is a clear 4xx."""

from __future__ import annotations

import json
import logging
from contextvars import ContextVar
from typing import Any
from urllib.parse import unquote_to_bytes, urlsplit

from starlette.datastructures import Headers
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.auth import is_loopback_host

log = logging.getLogger("recovery.http")

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
MAX_JSON_BODY = 1024 * 1024
MAX_JSON_DEPTH = 64
MAX_QUERY_STRING = 8192
MAX_DRAINED_BODY = 16 * 1024 * 1024  # read (and drop) this much of an oversized body so the 413 reaches the client


class BadBody(Exception):
    """A request body that is refused: `status` and a message for the client."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def json_depth_ok(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when no array/object nests deeper than `limit` (counted outside strings, without parsing)."""
    depth = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def _check_strings(value: Any) -> None:
    """Refuse NUL characters and lone surrogates anywhere in a parsed JSON value (no column can store them)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                raise BadBody(400, "JSON strings must not contain NUL characters (\\u0000)")
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise BadBody(400, "JSON strings must be valid Unicode (no lone surrogates such as \\ud800)") from None
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def parse_json_body(body: bytes) -> Any:
    """The JSON value of a request body, or BadBody(400/413) saying what is wrong with it."""
    if len(body) > MAX_JSON_BODY:
        raise BadBody(413, f"request body is larger than {MAX_JSON_BODY} bytes")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadBody(400, f"request body is not valid UTF-8 (byte {exc.start})") from None
    if not json_depth_ok(text):
        raise BadBody(400, f"JSON body nests deeper than {MAX_JSON_DEPTH} levels")
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise BadBody(400, f"request body is not valid JSON: {str(exc)[:120]}") from None
    if not isinstance(value, dict):
        raise BadBody(400, 'JSON body must be an object, such as {"query": "{ viewer { name } }"}')
    _check_strings(value)
    return value


def _own_origin_ok(value: str, hosts: set[str]) -> bool:
    """True when an Origin/Referer URL names a host (and port) the request was sent to."""
    try:
        parts = urlsplit(value)
    except ValueError:
        return False
    return bool(parts.scheme in {"http", "https"} and parts.netloc and parts.netloc.lower() in hosts)


class EdgeGuard:
    """ASGI middleware that refuses requests no route should see (see the module docstring)."""

    def __init__(self, app: ASGIApp, *, dev_mode: bool, allowed_hosts: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.dev_mode = dev_mode
        self.allowed_hosts = allowed_hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in {"http", "websocket"}:
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        problem = self._problem(scope, headers)
        if problem is not None:
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
                return
            await problem(scope, receive, send)
            return
        if scope["type"] == "http" and scope["method"] == "POST" and _is_json(headers) and not _is_push(scope):
            checked = await self._checked_json(scope, receive, send)
            if checked is None:
                return
            receive, parsed = checked
            token = _PARSED.set(parsed)
            try:
                await self.app(scope, receive, send)
            finally:
                _PARSED.reset(token)
            return
        await self.app(scope, receive, send)

    def _problem(self, scope: Scope, headers: Headers) -> Response | None:
        host = headers.get("host", "")
        if self.dev_mode and not self._host_allowed(host):
            # DNS rebinding: a page on evil.example resolving to 127.0.0.1 sends Host: evil.example.
            return refusal(
                scope,
                400,
                "Host not allowed: in dev mode (RECOVERY_DEV_NO_AUTH) only loopback names such as "
                "127.0.0.1 or localhost may be used",
            )
        query = scope.get("query_string", b"")
        if len(query) > MAX_QUERY_STRING:
            return refusal(scope, 414, f"query string longer than {MAX_QUERY_STRING} bytes")
        raw_path = scope.get("raw_path") or scope.get("path", "").encode("utf-8", "surrogateescape")
        for what, raw in (("path", raw_path), ("query string", query.replace(b"+", b" "))):
            decoded = unquote_to_bytes(raw)
            try:
                decoded.decode("utf-8")
            except UnicodeDecodeError:
                return refusal(scope, 400, f"the {what} is not valid UTF-8 once percent-decoded")
            if b"\x00" in decoded:
                return refusal(scope, 400, f"the {what} must not contain NUL (%00)")
        method = scope.get("method", "GET")
        if scope["type"] == "websocket" or method not in SAFE_METHODS:
            # The Host the browser used; behind a reverse proxy that rewrites Host, the one it forwards. (A page on
            # another site cannot set X-Forwarded-Host on a cross-site form post, so this opens nothing.)
            hosts = {host.lower()}
            forwarded = headers.get("x-forwarded-host")
            if forwarded:
                hosts.add(forwarded.split(",", 1)[0].strip().lower())
            origin = headers.get("origin")
            referer = headers.get("referer")
            if origin is not None and origin != "null" and not _own_origin_ok(origin, hosts):
                return _forbidden_origin(scope, f"Origin {origin[:80]!r} is not this site")
            if origin == "null" and ("cookie" in headers or self.dev_mode):
                # A sandboxed page or a redirect chain: it may not act with cookies, nor as the dev user.
                return _forbidden_origin(scope, "Origin null may not act with this site's cookies or in dev mode")
            if origin is None and referer is not None and not _own_origin_ok(referer, hosts):
                return _forbidden_origin(scope, "Referer is not this site")
            if (
                origin is None
                and referer is None
                and scope["type"] == "http"
                and "cookie" in headers
                and "authorization" not in headers
            ):
                # A browser always sends Origin with a POST; a cookie-carrying request without it is not a browser's.
                return _forbidden_origin(scope, "a state-changing request with cookies needs an Origin header")
        return None

    def _host_allowed(self, host: str) -> bool:
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        if host.startswith("[") and "]" in host:
            name = host[: host.index("]") + 1]
        return is_loopback_host(name) or name.lower() in self.allowed_hosts

    async def _checked_json(
        self, scope: Scope, receive: Receive, send: Send
    ) -> tuple[Receive, tuple[bytes, Any]] | None:
        """Read the whole body, check it parses, and hand it on with its value; None when the refusal was sent."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size <= MAX_JSON_BODY:
                chunks.append(chunk)
            if not message.get("more_body", False) or size > MAX_DRAINED_BODY:
                break
        if size > MAX_JSON_BODY:
            await _body_error(scope, BadBody(413, f"request body is larger than {MAX_JSON_BODY} bytes"), send)
            return None
        body = b"".join(chunks)
        try:
            value = parse_json_body(body)
        except BadBody as exc:
            await _body_error(scope, exc, send)
            return None
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return replay, (body, value)


# The body a route is handling and its JSON value, as the guard parsed it (see parsed_body).
_PARSED: ContextVar[tuple[bytes, Any] | None] = ContextVar("recovery_parsed_body", default=None)


def parsed_body(body: bytes) -> Any | None:
    """The JSON value of this request's body when the guard parsed these very bytes (a route need not parse them
    again), else None. Only the route that handles the request may use the value: it is not copied."""
    parsed = _PARSED.get()
    if parsed is not None and parsed[0] == body:
        return parsed[1]
    return None


def _is_push(scope: Scope) -> bool:
    """A log push (app/api/push.py): gzip-encoded JSON up to its own cap, decoded and checked by the endpoint."""
    path = scope.get("path", "")
    return path.endswith(("/loki/api/v1/push", "/v1/logs"))


def _is_json(headers: Headers) -> bool:
    content_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    return content_type == "application/json" or content_type.endswith("+json")


def refusal(scope: Scope, status: int, message: str) -> Response:
    """A refusal in the shape of the route family: GraphQL errors, the REST error object, or plain text."""
    path = scope.get("path", "")
    root = scope.get("root_path", "")
    local = path[len(root) :] if root and path.startswith(root) else path
    if local.endswith("/graphql"):
        code = "FORBIDDEN" if status == 403 else "BAD_USER_INPUT"
        return JSONResponse({"errors": [{"message": message, "extensions": {"code": code}}]}, status_code=status)
    if "/v1/" in local or local.endswith("/v1"):
        code = "PERMISSION_DENIED" if status == 403 else "INVALID_ARGUMENT"
        return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)
    return PlainTextResponse(message, status_code=status)


def _forbidden_origin(scope: Scope, reason: str) -> Response:
    return refusal(
        scope,
        403,
        f"cross-site request refused: {reason}; state-changing requests must come from this site's own pages",
    )


async def _body_error(scope: Scope, exc: BadBody, send: Send) -> None:
    async def no_body() -> Message:
        return {"type": "http.disconnect"}

    await refusal(scope, exc.status, exc.message)(scope, no_body, send)
