"""A bounded, read-only excerpt of a log file around one line (the dashboard's log view); no database here."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

CONTEXT_LINES = 50
MAX_LINE_CHARS = 2000  # a longer line is cut (and says so)
MAX_SCAN_BYTES = 512 * 1024 * 1024  # we count newlines at most this far into the file
MAX_EXCERPT_BYTES = 512 * 1024  # bytes of the excerpt itself
CHUNK = 1024 * 1024


@dataclass
class Excerpt:
    """Lines `first`..`first+len(lines)-1` (1-based) of the file; `problem` says why there are none."""

    path: str
    target: int
    first: int = 1
    lines: list[str] = field(default_factory=list)
    cut: list[bool] = field(default_factory=list)
    size: int = 0
    truncated: bool = False  # the window stopped at MAX_EXCERPT_BYTES
    problem: str | None = None


def read_excerpt(path: str, line: int, *, context: int = CONTEXT_LINES) -> Excerpt:
    """The `context` lines either side of 1-based `line`, read with bounded memory and bounded scanning."""
    line = max(1, line)
    first = max(1, line - context)
    last = line + context
    out = Excerpt(path=path, target=line, first=first)
    try:
        fh = open(path, "rb")  # noqa: SIM115 (closed below)
    except FileNotFoundError:
        out.problem = "the file no longer exists on this server"
        return out
    except (PermissionError, IsADirectoryError, OSError) as exc:
        out.problem = f"this server cannot read the file ({type(exc).__name__})"
        return out
    with fh:
        try:
            out.size = os.fstat(fh.fileno()).st_size
        except OSError:
            out.size = 0
        number = 1  # the number of the line that starts at `pos`
        pos = 0
        start_at: int | None = 0 if first == 1 else None
        ends_with_newline = False
        while start_at is None:
            if pos >= MAX_SCAN_BYTES:
                out.problem = f"line {line} lies more than {MAX_SCAN_BYTES // (1024 * 1024)} MiB into the file"
                return out
            chunk = fh.read(CHUNK)
            if not chunk:
                lines = number - 1 if ends_with_newline else number
                out.problem = f"the file has only {lines} line(s) now (it may have been truncated or replaced)"
                return out
            ends_with_newline = chunk.endswith(b"\n")
            index = -1
            while number < first:
                index = chunk.find(b"\n", index + 1)
                if index < 0:
                    break
                number += 1
            if number == first:
                start_at = pos + index + 1
            pos += len(chunk)
        fh.seek(start_at)
        data = fh.read(MAX_EXCERPT_BYTES + 1)
    out.truncated = len(data) > MAX_EXCERPT_BYTES
    body = data[:MAX_EXCERPT_BYTES]
    raw_lines = body.split(b"\n")
    if body.endswith(b"\n"):
        raw_lines.pop()  # the newline ends the last line; it does not start another
    for raw in raw_lines[: last - first + 1]:
        text = raw.rstrip(b"\r").decode("utf-8", errors="replace")
        out.cut.append(len(text) > MAX_LINE_CHARS)
        out.lines.append(text[:MAX_LINE_CHARS])
    if out.first + len(out.lines) - 1 < line:
        out.problem = f"the file has only {out.first + len(out.lines) - 1} line(s) now"
    return out
