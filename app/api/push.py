"""The push endpoints collectors send job logs to: `POST /loki/api/v1/push` and `POST /v1/logs` (OTLP/HTTP).

On the API service, not a separate listener: collectors already reach it (TLS, ingress, auth in one place),
every replica can take pushes because the database is the only state, and a 2xx is sent only after the
transaction holding the lines committed — the same guarantee on any replica. Answers: 401/403 (auth),
413 (body cap), 415 (media type), 400 (undecodable, hostile labels or times), 429 + Retry-After (this
process holds `push_queue_bytes` of pushes already), 503 + Retry-After (database away).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hmac
import logging
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from app.auth import Authenticator, AuthError
from app.domain.detection.rules_builtin import default_ruleset
from app.domain.detection.rules_file import parse_signature_config
from app.domain.detection.signatures import RuleSet
from app.infra import metrics
from app.infra.clusters import every_cluster
from app.infra.config import Settings
from app.infra.context import AppContext
from app.infra.db import utcnow
from app.infra.errors import database_error_text, database_problem
from app.infra.secret_files import read_secret_file
from app.ingest import service as ingest
from app.ingest.wire import BadPush, Stream, loki_json, loki_proto, otlp_json, otlp_proto
from app.jobfiles.reader import LogTailer

log = logging.getLogger("recovery.push")

MAX_STREAMS = 5000
MAX_LABELS = 64
MAX_LABEL_NAME = 256
MAX_LABEL_VALUE = 4096
RETRY_AFTER = "1"
CLEANUP_EVERY = 60.0  # seconds between retention sweeps of pushed-line identities (per process)


class PushRefused(Exception):
    """A push answered with an HTTP error (`status`, a message for the collector's log)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


def load_push_secrets(path: str) -> dict[str, str]:
    """Collector name → secret, from `name secret` lines (a broken file refuses the start, naming the line)."""
    if not path:
        return {}
    secrets: dict[str, str] = {}
    for number, raw in enumerate(read_secret_file(path, "RECOVERY_PUSH_SECRETS_FILE").splitlines(), 1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        name, _, secret = text.partition(" ")
        if not name or len(secret.strip()) < 16:
            raise ValueError(f"RECOVERY_PUSH_SECRETS_FILE line {number}: expected `name secret` (16+ characters)")
        secrets[name] = secret.strip()
    return secrets


def _ruleset(settings: Settings) -> RuleSet:
    if not settings.signatures_file:
        return default_ruleset()
    with open(settings.signatures_file, encoding="utf-8") as handle:
        return parse_signature_config(handle.read())


@dataclass
class _Budget:
    """Bytes of pushes in work in this process (the bounded queue behind 429)."""

    limit: int
    used: int = 0

    def take(self, size: int) -> bool:
        if self.used and self.used + size > self.limit:
            return False
        self.used += size
        return True

    def give(self, size: int) -> None:
        self.used = max(0, self.used - size)


class PushEndpoint:
    """One push endpoint (Loki or OTLP): authenticate, read within the caps, decode, record, acknowledge."""

    def __init__(
        self,
        ctx: AppContext,
        authenticator: Authenticator,
        protocol: str,
        shared: _Shared,
    ) -> None:
        self.ctx = ctx
        self.settings = ctx.settings
        self.authenticator = authenticator
        self.protocol = protocol
        self.shared = shared

    async def handle(self, request: Request) -> Response:
        """Answer one push."""
        started = time.perf_counter()
        try:
            collector = await self._collector(request)
            body = await self._body(request)
            try:
                streams = self._decode(request, body)
                self._check(streams)
                response = await self._record(collector, streams)
            finally:
                self.shared.budget.give(len(body))
        except PushRefused as exc:
            metrics.PUSH_REQUESTS.labels(protocol=self.protocol, status=str(exc.status)).inc()
            return JSONResponse({"error": exc.message}, status_code=exc.status, headers=exc.headers)
        metrics.PUSH_REQUESTS.labels(protocol=self.protocol, status=str(response.status_code)).inc()
        metrics.PUSH_SECONDS.labels(protocol=self.protocol).observe(time.perf_counter() - started)
        return response

    async def _collector(self, request: Request) -> str:
        """Who pushes: a collector of the secrets file, or the subject of a bearer JWT with the collector role."""
        header = request.headers.get("authorization", "")
        scheme, _, credential = header.partition(" ")
        credential = credential.strip()
        if not header:
            raise PushRefused(401, "a push needs credentials", {"WWW-Authenticate": 'Bearer realm="recovery-push"'})
        secrets = self.shared.secrets
        if scheme.lower() == "basic":
            try:
                name, _, secret = base64.b64decode(credential, validate=True).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                raise PushRefused(401, "malformed basic credentials") from None
            expected = secrets.get(name)
            if expected is not None and hmac.compare_digest(secret.encode(), expected.encode()):
                return name
            raise PushRefused(401, "unknown collector or wrong secret")
        if scheme.lower() != "bearer" or not credential:
            raise PushRefused(401, "expected Authorization: Bearer <secret or token> (or Basic)")
        for name, expected in secrets.items():
            if hmac.compare_digest(credential.encode(), expected.encode()):
                return name
        verify = getattr(self.authenticator, "verify_collector", None)
        if verify is None or credential.count(".") != 2:
            raise PushRefused(401, "unknown collector secret")
        try:
            subject: str = await verify(credential)
        except AuthError as exc:
            raise PushRefused(exc.status, exc.message) from None
        return f"jwt:{subject}"

    async def _body(self, request: Request) -> bytes:
        """The body within the cap (413) and the process's push budget (429)."""
        cap = self.settings.push_max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > cap:
            raise PushRefused(413, f"body of {declared} bytes exceeds the {cap}-byte push cap")
        reserve = int(declared) if declared and declared.isdigit() else cap
        if not self.shared.budget.take(reserve):
            metrics.PUSH_BACKPRESSURE.inc()
            raise PushRefused(429, "too many pushes in progress; retry later", {"Retry-After": RETRY_AFTER})
        chunks: list[bytes] = []
        size = 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > cap:
                    raise PushRefused(413, f"body exceeds the {cap}-byte push cap")
                chunks.append(chunk)
        except ClientDisconnect:
            raise PushRefused(400, "the client went away mid-body") from None
        except PushRefused:
            self.shared.budget.give(reserve)
            raise
        body = b"".join(chunks)
        self.shared.budget.give(reserve - len(body))  # keep exactly the body's size reserved
        return body

    def _decode(self, request: Request, body: bytes) -> list[Stream]:
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        encoding = request.headers.get("content-encoding", "").strip().lower()
        cap = self.settings.push_max_body_bytes
        try:
            if encoding in ("gzip", "x-gzip"):
                body = _gunzip(body, cap)
            elif encoding == "snappy":
                body = _unsnappy(body, cap)
            elif encoding not in ("", "identity"):
                raise PushRefused(415, f"content encoding {encoding!r} is not supported (gzip, snappy)")
            if media in ("application/x-protobuf", "application/protobuf"):
                if self.protocol == "loki":
                    # Loki's protobuf push is snappy-compressed by definition (no Content-Encoding says so).
                    if encoding != "snappy":
                        body = _unsnappy(body, cap)
                    return loki_proto(body)
                return otlp_proto(body)
            if media == "application/json":
                return loki_json(body) if self.protocol == "loki" else otlp_json(body)
        except BadPush as exc:
            raise PushRefused(400, f"cannot decode the {self.protocol} push: {exc}") from None
        raise PushRefused(415, f"content type {media or '(none)'!r}: send application/x-protobuf or application/json")

    def _check(self, streams: list[Stream]) -> None:
        """Hostile shapes are refused whole (400), before anything is recorded."""
        if len(streams) > MAX_STREAMS:
            raise PushRefused(400, f"{len(streams)} streams in one push (at most {MAX_STREAMS})")
        now_ns = time.time_ns()
        newest = now_ns + int(self.settings.push_max_future * 1e9)
        oldest = now_ns - int(self.settings.push_max_age * 1e9)
        for stream in streams:
            labels = stream.labels
            if len(labels) > MAX_LABELS:
                raise PushRefused(400, f"a stream has {len(labels)} labels (at most {MAX_LABELS})")
            for name, value in labels.items():
                if len(name) > MAX_LABEL_NAME or len(value) > MAX_LABEL_VALUE:
                    raise PushRefused(400, "a label name or value is too long")
                if "\x00" in name or "\x00" in value:
                    raise PushRefused(400, "a label holds a NUL character")
            for entry in stream.entries:
                if entry.time_ns and not oldest <= entry.time_ns <= newest:
                    when = dt.datetime.fromtimestamp(entry.time_ns / 1e9, dt.UTC) if entry.time_ns < 1 << 62 else None
                    shown = when.isoformat() if when else str(entry.time_ns)
                    where = "in the future" if entry.time_ns > newest else "too far in the past"
                    raise PushRefused(400, f"entry timestamp {shown} is {where} (labels {sorted(labels)})")
                if "\x00" in entry.line:
                    raise PushRefused(400, "a line holds a NUL character")

    async def _record(self, collector: str, streams: list[Stream]) -> Response:
        now = utcnow()
        try:
            async with self.ctx.sessions() as session, session.begin():
                outcome = await ingest.record_push(
                    session,
                    collector=collector,
                    streams=streams,
                    settings=self.settings,
                    push_clusters=self.shared.push_clusters,
                    tailer=self.shared.reader(),
                    now=now,
                )
                if time.monotonic() >= self.shared.next_cleanup:
                    self.shared.next_cleanup = time.monotonic() + CLEANUP_EVERY
                    before = now - dt.timedelta(seconds=self.settings.push_retention)
                    await ingest.forget_old_lines(session, before=before)
        except Exception as exc:
            if database_problem(exc) is None:
                raise
            log.warning("push from %s not recorded: %s", collector, database_error_text(exc))
            raise PushRefused(
                503, "the database is unavailable; nothing was recorded, retry", {"Retry-After": RETRY_AFTER}
            ) from None
        metrics.PUSH_LINES.labels(outcome="recorded").inc(outcome.recorded)
        metrics.PUSH_LINES.labels(outcome="replayed").inc(outcome.replayed)
        for reason, count in outcome.dropped.items():
            metrics.PUSH_LINES.labels(outcome=f"dropped:{reason}").inc(count)
        summary = (
            f"lines={outcome.lines} recorded={outcome.recorded} replayed={outcome.replayed} "
            f"dropped={sum(outcome.dropped.values())} anomalies={outcome.anomalies}"
        )
        if outcome.dropped:
            summary += " " + " ".join(f"dropped.{k}={v}" for k, v in sorted(outcome.dropped.items()))
        headers = {"X-Recovery-Push": summary}
        if self.protocol == "loki":
            return Response(status_code=204, headers=headers)
        return JSONResponse(_otlp_answer(outcome), headers=headers)


def _otlp_answer(outcome: ingest.PushOutcome) -> dict[str, object]:
    dropped = sum(outcome.dropped.values())
    if not dropped:
        return {}
    reasons = ", ".join(f"{count} {reason}" for reason, count in sorted(outcome.dropped.items()))
    return {"partialSuccess": {"rejectedLogRecords": str(dropped), "errorMessage": f"dropped: {reasons}"}}


def _gunzip(body: bytes, cap: int) -> bytes:
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(body, cap + 1)
    except zlib.error:
        raise BadPush("the gzip body is corrupt") from None
    if len(out) > cap or inflater.unconsumed_tail:
        raise PushRefused(413, f"the body decompresses beyond the {cap}-byte push cap")
    return out


def _unsnappy(body: bytes, cap: int) -> bytes:
    import cramjam

    length = shift = 0
    for index, byte in enumerate(body[:10]):  # the block format starts with the uncompressed length (a varint)
        length |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            break
        if index == 9:
            raise BadPush("the snappy body has no length")
    if length > cap:
        raise PushRefused(413, f"the body decompresses to {length} bytes, beyond the {cap}-byte push cap")
    try:
        return bytes(cramjam.snappy.decompress_raw(body))
    except Exception:  # cramjam raises its own DecompressionError
        raise BadPush("the snappy body is corrupt") from None


@dataclass
class _Shared:
    """What both endpoints of a process share: the budget, the secrets, the reader, the clusters taking pushes."""

    budget: _Budget
    secrets: dict[str, str]
    settings: Settings
    push_clusters: dict[str, bool]
    next_cleanup: float = 0.0
    tailer: LogTailer | None = None

    def reader(self) -> LogTailer:
        """The process's reader of pushed lines, built on the first push (compiling the rules takes a second)."""
        if self.tailer is None:
            self.tailer = LogTailer(_ruleset(self.settings), traceback_wait=0.0)
        return self.tailer


def push_routes(ctx: AppContext, authenticator: Authenticator) -> list[BaseRoute]:
    """The Loki and OTLP push routes (before /v1's mount, so /v1/logs is this one)."""
    settings = ctx.settings
    shared = _Shared(
        budget=_Budget(settings.push_queue_bytes),
        secrets=load_push_secrets(settings.push_secrets_file),
        settings=settings,
        push_clusters={cluster.cluster: cluster.log_push for cluster in every_cluster(settings)},
    )
    make: Callable[[str], PushEndpoint] = lambda protocol: PushEndpoint(ctx, authenticator, protocol, shared)  # noqa: E731
    return [
        Route("/loki/api/v1/push", make("loki").handle, methods=["POST"]),
        Route("/v1/logs", make("otlp").handle, methods=["POST"]),
    ]
