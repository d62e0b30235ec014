"""Reading tracked log files from where the collector left off, within a tick's budget (runs in a worker thread)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from app.logs.reader import FilePosition, LogEvent, LogTailer, ReadResult
from app.logs.safe_open import AccessRule, Refused
from worker.collector.discovery import Tracked

log = logging.getLogger("recovery.collector")

MAX_FILES_PER_TICK = 2000
MAX_BYTES_PER_TICK = 512 * 1024 * 1024
MAX_SECONDS_PER_TICK = 10.0  # reading stops here too (a slow network filesystem); the rest waits for the next tick
REFUSED_RETRY = 60.0  # seconds before an unchanged refused path is opened again (a directory's mode may change)


@dataclass
class FileRead:
    """All reads of one file in one tick, merged."""

    tracked: Tracked
    results: list[ReadResult]

    @property
    def position(self) -> FilePosition:
        return self.results[-1].position

    @property
    def events(self) -> list[LogEvent]:
        return [e for r in self.results for e in r.events]

    @property
    def notes(self) -> list[str]:
        return [n for r in self.results for n in r.notes]

    @property
    def bytes_read(self) -> int:
        return sum(r.bytes_read for r in self.results)

    @property
    def refused(self) -> Refused | None:
        """Why the file's path was not opened this tick (None: it was, or it is missing)."""
        return next((r.refused for r in self.results if r.refused is not None), None)


def read_files(
    tailer: LogTailer,
    candidates: list[Tracked],
    access_of: Callable[[Tracked], AccessRule],
    max_files: int = MAX_FILES_PER_TICK,
) -> tuple[list[FileRead], list[str]]:
    """(what was read, paths left unfinished by the byte, time or file budget); touches only the tailer and Tracked.

    Every candidate is looked at (a stat: an idle poll of N files is N stats); only files with
    something to read count against `max_files`, the rest of those are left for the next tick.
    Each file is opened with its job's rights (`access_of`, app/logs/safe_open.py): a refused path is
    never read, and its FileRead says why.
    """
    reads: list[FileRead] = []
    budget = MAX_BYTES_PER_TICK
    deadline = time.monotonic() + MAX_SECONDS_PER_TICK
    unfinished: list[str] = []
    for tracked in candidates:
        if budget <= 0 or time.monotonic() > deadline:
            unfinished.append(tracked.path)
            continue
        seen_mtime = tracked.mtime
        if not tracked.closing and _unchanged(tracked, access_of):
            continue
        if len(reads) >= max_files:
            tracked.mtime = seen_mtime  # not read this tick: the next one must still see the change
            unfinished.append(tracked.path)
            continue
        results: list[ReadResult] = []
        position = tracked.position
        while True:
            try:
                result = tailer.read(position, access=access_of(tracked))
            except OSError as exc:  # permissions changed, I/O error on a network filesystem
                log.warning("reading %s failed: %s", tracked.path, exc)
                break
            results.append(result)
            position = result.position
            budget -= result.bytes_read
            if not result.more:
                break
            if budget <= 0 or time.monotonic() > deadline:
                unfinished.append(tracked.path)
                break
        if results:
            read = FileRead(tracked, results)
            tracked.refused = None
            if read.refused is not None:
                identity = _identity(tracked.path)
                if identity is not None:
                    tracked.refused = (identity, access_of(tracked), time.monotonic())
            reads.append(read)
    return reads, unfinished


def _identity(path: str, st: os.stat_result | None = None) -> tuple[int, ...] | None:
    """What must change before a refused path is worth another open: the entry itself, never what it points to."""
    if st is None:
        try:
            st = os.lstat(path)
        except OSError:
            return None
    return (st.st_ino, st.st_dev, st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns, st.st_ctime_ns)


def _still_refused(tracked: Tracked, st: os.stat_result, access_of: Callable[[Tracked], AccessRule]) -> bool:
    """The path was refused and neither it nor the job's rule changed since (looked at again every REFUSED_RETRY)."""
    if tracked.refused is None or tracked.position.inode is not None or tracked.closing:
        return False
    identity, rule, at = tracked.refused
    return (
        _identity(tracked.path, st) == identity and time.monotonic() - at < REFUSED_RETRY and access_of(tracked) == rule
    )


def _unchanged(tracked: Tracked, access_of: Callable[[Tracked], AccessRule]) -> bool:
    """Nothing to read: same file, same size as our offset, same mtime (saves the open and head check)."""
    position = tracked.position
    try:
        st = os.lstat(tracked.path)  # never follows a symlink: the job controls the path
    except OSError:
        return position.inode is None  # still missing; a vanished file must be read to notice it
    if _still_refused(tracked, st, access_of):
        return True  # opening it again would be refused again (and recorded nowhere: once per reason)
    same = (
        (st.st_ino, st.st_dev) == (position.inode, position.device)
        and st.st_size == position.offset
        and st.st_mtime == tracked.mtime
    )
    tracked.mtime = st.st_mtime
    return same and not position.skipping
