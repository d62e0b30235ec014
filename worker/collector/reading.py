"""Reading tracked log files from where the collector left off, within a tick's budget (runs in a worker thread)."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace

from app.domain import rootcause
from app.domain.logline import decode_line
from app.domain.signatures import CrashSignature
from app.logs.reader import FilePosition, LogEvent, LogTailer, ReadResult
from worker.collector.discovery import Tracked

log = logging.getLogger("recovery.collector")

MAX_FILES_PER_TICK = 2000
MAX_BYTES_PER_TICK = 512 * 1024 * 1024


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


def read_files(
    tailer: LogTailer, candidates: list[Tracked], max_files: int = MAX_FILES_PER_TICK
) -> tuple[list[FileRead], list[str]]:
    """(what was read, paths left unfinished by the byte or file budget); touches only the tailer and Tracked objects.

    Every candidate is looked at (a stat: an idle poll of N files is N stats); only files with
    something to read count against `max_files`, the rest of those are left for the next tick.
    """
    reads: list[FileRead] = []
    budget = MAX_BYTES_PER_TICK
    unfinished: list[str] = []
    for tracked in candidates:
        if budget <= 0:
            unfinished.append(tracked.path)
            continue
        seen_mtime = tracked.mtime
        if not tracked.closing and _unchanged(tracked):
            continue
        if len(reads) >= max_files:
            tracked.mtime = seen_mtime  # not read this tick: the next one must still see the change
            unfinished.append(tracked.path)
            continue
        results: list[ReadResult] = []
        position = tracked.position
        while True:
            try:
                result = tailer.read(position)
            except OSError as exc:  # permissions changed, I/O error on a network filesystem
                log.warning("reading %s failed: %s", tracked.path, exc)
                break
            if result.events:
                result = replace(result, events=_launcher_blocks(result.events))
            results.append(result)
            position = result.position
            budget -= result.bytes_read
            if not result.more:
                break
            if budget <= 0:
                unfinished.append(tracked.path)
                break
        if results:
            reads.append(FileRead(tracked, results))
    return reads, unfinished


_BLOCK_CONTEXT = 2048  # bytes above a launcher block's exitcode line: its host and rank lines


def _launcher_blocks(found: Sequence[LogEvent]) -> tuple[LogEvent, ...]:
    """torchrun's failure block names the failed process's host and rank a few lines above the
    `exitcode :` / `traceback :` line the signature matched: read them back, so the root cause has its node."""
    events = list(found)
    for index, event in enumerate(events):
        signal = event.signal
        if not isinstance(signal, CrashSignature) or not rootcause.LAUNCHER_BLOCK_FIELD.match(event.text):
            continue
        start = max(0, event.offset - _BLOCK_CONTEXT)
        try:
            with open(event.path, "rb") as handle:
                handle.seek(start)
                before = handle.read(event.offset - start)
        except OSError:
            continue
        rank, host = rootcause.launcher_block_facts([decode_line(raw) for raw in before.split(b"\n")[:-1]])
        nodes = signal.nodes if host is None or host in signal.nodes else (host, *signal.nodes)
        if rank is None and nodes == signal.nodes:
            continue
        events[index] = replace(
            event, signal=replace(signal, rank=signal.rank if signal.rank is not None else rank, nodes=nodes)
        )
    return tuple(events)


def _unchanged(tracked: Tracked) -> bool:
    """Nothing to read: same file, same size as our offset, same mtime (saves the open and head check)."""
    position = tracked.position
    try:
        st = os.stat(tracked.path)
    except OSError:
        return position.inode is None  # still missing; a vanished file must be read to notice it
    same = (
        (st.st_ino, st.st_dev) == (position.inode, position.device)
        and st.st_size == position.offset
        and st.st_mtime == tracked.mtime
    )
    tracked.mtime = st.st_mtime
    return same and not position.skipping
