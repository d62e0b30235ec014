"""A bounded, read-only excerpt of a log file around one line (the dashboard's log view); no database here.

The file is opened through app/jobfiles/safe_open.py with the job's rights (never a symlink, FIFO, socket,
device or another user's file) and must still be the file the collector accepted (same device and
inode). Finding the line costs one `bytes.count` per 1 MiB chunk, within MAX_SCAN_BYTES and
SCAN_SECONDS.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from app.jobfiles import safe_open
from app.jobfiles.safe_open import AccessRule, Refused

CONTEXT_LINES = 50
MAX_LINE_CHARS = 2000  # a longer line is cut (and says so)
MAX_SCAN_BYTES = 512 * 1024 * 1024  # we count newlines at most this far into the file
MAX_EXCERPT_BYTES = 512 * 1024  # bytes of the excerpt itself
SCAN_SECONDS = 2.0  # wall-clock budget of the newline count (a slow disk must not hold a worker thread)
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
    refused: str | None = None  # the safe_open reason when the file was not opened at all


def _nth_newline(chunk: bytes, n: int) -> int:
    """Index of the n-th (1-based) newline of chunk, which holds at least n: a binary search over bytes.count."""
    low, high = 0, len(chunk)  # the answer lies in [low, high)
    while high - low > 4096:
        middle = (low + high) // 2
        if chunk.count(b"\n", 0, middle) >= n:
            high = middle
        else:
            low = middle
    index = low - 1
    for _ in range(n - chunk.count(b"\n", 0, low)):
        index = chunk.find(b"\n", index + 1)
    return index


def _line_start(fd: int, first: int, deadline: float) -> tuple[int | None, str | None]:
    """(byte offset where 1-based line `first` starts, None) or (None, why it cannot be found)."""
    if first == 1:
        return 0, None
    number, pos, ends_with_newline = 1, 0, False  # `number`: the line that starts at `pos`
    while True:
        if pos >= MAX_SCAN_BYTES:
            return None, f"line {first} lies more than {MAX_SCAN_BYTES // (1024 * 1024)} MiB into the file"
        if time.monotonic() > deadline:
            return None, f"line {first} lies too far into the file to find in {SCAN_SECONDS:.0f} s"
        chunk = os.pread(fd, CHUNK, pos)
        if not chunk:
            lines = number - 1 if ends_with_newline else number
            return None, f"the file has only {lines} line(s) now (it may have been truncated or replaced)"
        ends_with_newline = chunk.endswith(b"\n")
        newlines = chunk.count(b"\n")
        if number + newlines >= first:
            return pos + _nth_newline(chunk, first - number) + 1, None
        number += newlines
        pos += len(chunk)


def read_excerpt(
    path: str,
    line: int,
    *,
    access: AccessRule,
    accepted: tuple[int | None, int | None] | None = None,
    context: int = CONTEXT_LINES,
) -> Excerpt:
    """The `context` lines either side of 1-based `line`, read with the job's rights, bounded memory and scanning.

    `accepted`: the (device, inode) the collector read at this path; another file there is not shown.
    """
    line = max(1, line)
    first = max(1, line - context)
    last = line + context
    out = Excerpt(path=path, target=line, first=first)
    try:
        fd, st = safe_open.open_file(path, access)
    except Refused as exc:
        out.problem, out.refused = f"Recovery does not show this file: {exc.detail}", exc.reason
        return out
    except (FileNotFoundError, NotADirectoryError):
        out.problem = "the file no longer exists on this server"
        return out
    except OSError as exc:
        out.problem = f"this server cannot read the file ({type(exc).__name__})"
        return out
    try:
        out.size = st.st_size
        if accepted is not None and (st.st_dev, st.st_ino) != accepted:
            out.problem = "the file at this path changed since Recovery last read it; try again in a moment"
            return out
        start_at, problem = _line_start(fd, first, time.monotonic() + SCAN_SECONDS)
        if start_at is None:
            out.problem = problem
            return out
        data = os.pread(fd, MAX_EXCERPT_BYTES + 1, start_at)
    finally:
        os.close(fd)
    out.truncated = len(data) > MAX_EXCERPT_BYTES
    body = data[:MAX_EXCERPT_BYTES]
    raw_lines = body.split(b"\n", last - first + 1)
    if len(raw_lines) > last - first + 1:
        raw_lines.pop()  # the rest after the window
    elif body.endswith(b"\n"):
        raw_lines.pop()  # the newline ends the last line; it does not start another
    for raw in raw_lines[: last - first + 1]:
        text = raw.rstrip(b"\r").decode("utf-8", errors="replace")
        out.cut.append(len(text) > MAX_LINE_CHARS)
        out.lines.append(text[:MAX_LINE_CHARS])
    if out.first + len(out.lines) - 1 < line:
        out.problem = f"the file has only {out.first + len(out.lines) - 1} line(s) now"
    return out
