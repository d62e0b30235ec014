"""Reading tracked log files from where the collector left off, within a tick's budget (runs in a worker thread)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from app.domain.detection import line_nodes
from app.domain.detection.line_facts import decode_line
from app.domain.detection.signatures import NODE_FAIL, CrashSignature
from app.jobfiles import safe_open
from app.jobfiles.reader import FilePosition, LogEvent, LogTailer, ReadResult
from app.jobfiles.safe_open import AccessRule, Refused
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
    # Per event id: other lines naming the PID a launcher summary names (see _launcher_blocks).
    context: dict[str, tuple[str, ...]] = field(default_factory=dict)

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
    Each file is opened with its job's rights (`access_of`, app/jobfiles/safe_open.py): a refused path is
    never read, and its FileRead says why.
    """
    reads: list[FileRead] = []
    budget = MAX_BYTES_PER_TICK
    deadline = time.monotonic() + MAX_SECONDS_PER_TICK
    unfinished: list[str] = []
    lstat = os.lstat
    for n, tracked in enumerate(candidates):
        # the clock is looked at every 64 files: an idle poll of N files is N stats and little else
        if budget <= 0 or (n & 63 == 0 and time.monotonic() > deadline):
            unfinished.append(tracked.path)
            continue
        seen_mtime = tracked.mtime
        if not tracked.closing:
            # nothing to read: same file, same size as our offset, same mtime (saves the open and head check)
            position = tracked.read_from
            try:
                st = lstat(tracked.path)  # never follows a symlink: the job controls the path
            except OSError:
                if position.inode is None:
                    continue  # still missing; a vanished file must be read to notice it
                st = None
            if st is not None:
                if tracked.refused is not None and _still_refused(tracked, st, access_of):
                    continue  # opening it again would be refused again (and recorded nowhere: once per reason)
                mtime = st.st_mtime
                same = (
                    st.st_size == position.offset
                    and mtime == seen_mtime
                    and st.st_ino == position.inode
                    and st.st_dev == position.device
                    and not position.skipping
                )
                tracked.mtime = mtime
                if same:
                    continue
        if len(reads) >= max_files:
            tracked.mtime = seen_mtime  # not read this tick: the next one must still see the change
            unfinished.append(tracked.path)
            continue
        results: list[ReadResult] = []
        context: dict[str, tuple[str, ...]] = {}
        position = tracked.read_from
        while True:
            try:
                result = tailer.read(position, access=access_of(tracked))
            except OSError as exc:  # permissions changed, I/O error on a network filesystem
                log.warning("reading %s failed: %s", tracked.path, exc)
                break
            if result.events:
                result = replace(result, events=_launcher_blocks(result.events, context, access_of(tracked)))
            results.append(result)
            position = result.position
            budget -= result.bytes_read
            if not result.more:
                break
            if budget <= 0 or time.monotonic() > deadline:
                unfinished.append(tracked.path)
                break
        if results:
            read = FileRead(tracked, results, context)
            tracked.refused = None
            if read.refused is not None:
                identity = _identity(tracked.path)
                if identity is not None:
                    tracked.refused = (identity, access_of(tracked), time.monotonic())
            reads.append(read)
    return reads, unfinished


_BLOCK_CONTEXT = 2048  # bytes above a launcher block's exitcode line: its host and rank lines
_PID_SCAN = 1024 * 1024  # bytes from the file's start searched for lines naming the failed PID


def _launcher_blocks(
    found: Sequence[LogEvent], context: dict[str, tuple[str, ...]], access: AccessRule
) -> tuple[LogEvent, ...]:
    """torchrun's failure block names the failed process's host and rank a few lines above the
    `exitcode :` / `traceback :` line the signature matched: read them back, so the root cause has its node.
    Lines naming the failed PID or rank (NCCL's `host:pid:tid ... rank N`, a start-up line) go to `context`,
    for the attempt's allocation to match (record_crash)."""
    events = list(found)
    heads: dict[str, bytes] = {}
    for index, event in enumerate(events):
        signal = event.signal
        if not isinstance(signal, CrashSignature):
            continue
        rank = signal.rank
        if line_nodes.LAUNCHER_BLOCK_FIELD.match(event.text):
            before = _read(event.path, max(0, event.offset - _BLOCK_CONTEXT), event.offset, access)
            above = [decode_line(raw) for raw in before.split(b"\n")[:-1]]
            block_rank, host = line_nodes.launcher_block_facts(above)
            nodes = signal.nodes if host is None or host in signal.nodes else (host, *signal.nodes)
            rank = rank if rank is not None else block_rank
            first = line_nodes.under_root_cause_head(above)
            if (rank, nodes, first) != (signal.rank, signal.nodes, signal.first_observed):
                events[index] = replace(event, signal=replace(signal, rank=rank, nodes=nodes, first_observed=first))
        elif signal.category == NODE_FAIL and not signal.nodes:
            # Ray's "The actor is dead because its node has died." closes a block whose `ip:` line names the node.
            before = _read(event.path, max(0, event.offset - _BLOCK_CONTEXT), event.offset, access)
            host = line_nodes.actor_block_node([decode_line(raw) for raw in before.split(b"\n")[:-1]])
            if host is not None:
                events[index] = replace(event, signal=replace(signal, nodes=(host,)))
        pid = line_nodes.process_id(event.text) if line_nodes.LAUNCHER_BLOCK_FIELD.match(event.text) else None
        if pid is None and rank is None:
            continue
        if event.path not in heads:
            heads[event.path] = _read(event.path, 0, _PID_SCAN, access)
        head = [decode_line(raw) for raw in heads[event.path][: event.offset].split(b"\n")[:-1]]
        lines = line_nodes.lines_naming_pid(head, pid) if pid is not None else []
        if rank is not None:
            lines += line_nodes.lines_naming_rank(head, rank)
        if lines:
            context[event.event_id] = tuple(lines)
    return tuple(events)


def _read(path: str, start: int, end: int, access: AccessRule) -> bytes:
    """Bytes [start, end) of a file, opened with the job's rights; nothing when it cannot be or may not be read."""
    try:
        fd, _ = safe_open.open_file(path, access)
    except (OSError, Refused):
        return b""
    try:
        return os.pread(fd, max(0, end - start), start)
    except OSError:
        return b""
    finally:
        os.close(fd)


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
    if tracked.refused is None or tracked.read_from.inode is not None or tracked.closing:
        return False
    identity, rule, at = tracked.refused
    return (
        _identity(tracked.path, st) == identity and time.monotonic() - at < REFUSED_RETRY and access_of(tracked) == rule
    )
