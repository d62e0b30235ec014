"""Static files compressed and cacheable: gzip once per file version (kept in memory), ETag and Last-Modified
validation, long-lived caching for versioned names (`htmx-2.0.11.min.js`), revalidation for our own files."""

from __future__ import annotations

import gzip
import hashlib
import mimetypes
import os
import re
import stat
from dataclasses import dataclass
from email.utils import formatdate, parsedate_to_datetime

import anyio
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

# A version in the file name (`-2.0.11.`) means the content never changes under that name.
VERSIONED_NAME = re.compile(r"-\d+\.\d+(\.\d+)*[.-]")
IMMUTABLE = "public, max-age=31536000, immutable"
REVALIDATE = "no-cache"  # cache, but ask each time (answered 304 while the ETag matches)
COMPRESSIBLE = ("text/", "application/javascript", "application/json", "image/svg+xml")
MIN_COMPRESS_BYTES = 512
MAX_CACHED_BYTES = 16 * 1024 * 1024  # a file larger than this is served by Starlette, uncompressed


@dataclass(frozen=True)
class Prepared:
    """One file version ready to send: raw and gzip bytes with their validators."""

    body: bytes
    gzipped: bytes | None
    etag: str
    last_modified: str
    media_type: str
    cache_control: str


def cache_control_for(name: str) -> str:
    """Versioned vendored names are immutable; anything else must be revalidated."""
    return IMMUTABLE if VERSIONED_NAME.search(os.path.basename(name)) else REVALIDATE


def prepare(full_path: str, st: os.stat_result) -> Prepared:
    """Read and compress a file (called in a worker thread, once per (path, mtime, size))."""
    with open(full_path, "rb") as fh:
        body = fh.read()
    media_type = mimetypes.guess_type(full_path)[0] or "application/octet-stream"
    if media_type.startswith("text/") or media_type == "application/javascript":
        media_type += "; charset=utf-8"
    compress = len(body) >= MIN_COMPRESS_BYTES and media_type.startswith(COMPRESSIBLE)
    return Prepared(
        body=body,
        gzipped=gzip.compress(body, compresslevel=6, mtime=0) if compress else None,
        etag='"' + hashlib.sha256(body).hexdigest()[:32] + '"',
        last_modified=formatdate(st.st_mtime, usegmt=True),
        media_type=media_type,
        cache_control=cache_control_for(full_path),
    )


def not_modified(request: Headers, item: Prepared) -> bool:
    """If-None-Match wins over If-Modified-Since (RFC 9110 §13.2.2)."""
    inm = request.get("if-none-match")
    if inm is not None:
        tags = {t.strip().removeprefix("W/") for t in inm.split(",")}
        return "*" in tags or item.etag in tags or item.etag[:-1] + '-gzip"' in tags
    ims = request.get("if-modified-since")
    if ims:
        try:
            return parsedate_to_datetime(ims) >= parsedate_to_datetime(item.last_modified)
        except (TypeError, ValueError):
            return False
    return False


def _quality(params: str) -> float:
    """The q of one Accept-Encoding entry's parameters (1 when absent, 0 when unreadable: refusing is safe)."""
    for param in params.split(";"):
        key, _, value = param.partition("=")
        if key.strip().lower() == "q":
            try:
                q = float(value.strip())
            except ValueError:
                return 0.0
            return q if 0.0 <= q <= 1.0 else 0.0
    return 1.0


def accepts_gzip(request: Headers) -> bool:
    """Accept-Encoding allows gzip: its own entry's q (else the `*` entry's) is above zero (RFC 9110 12.5.3), so
    `gzip;q=0` and `*, gzip;q=0` mean no gzip."""
    qualities: dict[str, float] = {}
    for part in request.get("accept-encoding", "").split(","):
        name, _, params = part.strip().partition(";")
        coding = name.strip().lower()
        if coding:
            qualities[coding] = min(qualities.get(coding, 1.0), _quality(params))
    q = qualities.get("gzip", qualities.get("x-gzip", qualities.get("*", 0.0)))
    return q > 0


class CompressedStaticFiles(StaticFiles):
    """StaticFiles that sends gzip when asked, with a strong ETag per encoding and Cache-Control."""

    def __init__(self, *, directory: str) -> None:
        super().__init__(directory=directory)
        self._prepared: dict[tuple[str, float, int], Prepared] = {}

    async def get_response(self, path: str, scope: Scope) -> Response:
        if scope["method"] in ("GET", "HEAD"):
            try:
                full_path, st = await anyio.to_thread.run_sync(self.lookup_path, path)
            except (OSError, ValueError):
                full_path, st = "", None
            if st is not None and stat.S_ISREG(st.st_mode) and st.st_size <= MAX_CACHED_BYTES:
                key = (full_path, st.st_mtime, st.st_size)
                item = self._prepared.get(key)
                if item is None:
                    item = await anyio.to_thread.run_sync(prepare, full_path, st)
                    self._prepared = {k: v for k, v in self._prepared.items() if k[0] != full_path}
                    self._prepared[key] = item
                return self._respond(item, Headers(scope=scope), head=scope["method"] == "HEAD")
        response = await super().get_response(path, scope)
        response.headers.setdefault("cache-control", REVALIDATE)
        return response

    @staticmethod
    def _respond(item: Prepared, request: Headers, *, head: bool) -> Response:
        gz = item.gzipped is not None and accepts_gzip(request)
        etag = item.etag[:-1] + '-gzip"' if gz else item.etag
        headers = {"etag": etag, "last-modified": item.last_modified, "cache-control": item.cache_control}
        if item.gzipped is not None:
            headers["vary"] = "Accept-Encoding"
        if not_modified(request, item):
            return Response(status_code=304, headers=headers)
        body = item.gzipped if gz and item.gzipped is not None else item.body
        if gz:
            headers["content-encoding"] = "gzip"
        response = Response(b"" if head else body, media_type=item.media_type, headers=headers)
        response.headers["content-length"] = str(len(body))
        return response
