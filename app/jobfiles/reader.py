"""Tail one log file from a saved position in large chunks and hand back only what detectors need.

No database here: the caller stores `ReadResult.position` and passes it back next time. Per call
the reader returns the crash and checkpoint lines found by the chunk prefilter, the latest
progress marker and throughput sample (or all of them, for offline tools), and the facts a hang
detector needs about recent output — without turning every line into a Python string.
"""

from __future__ import annotations

import hashlib
import os
import resource
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, tzinfo
from typing import NamedTuple, TypeVar, cast

from app.domain.detection.chunkscan import ChunkScanner, Span
from app.domain.detection.line_facts import (
    attempt_label,
    decode_line,
    event_identity,
    helper_step_exit,
    parse_timestamp,
)
from app.domain.detection.progress import StepReading, parse_bar_line, rates_of
from app.domain.detection.rules_builtin import default_ruleset
from app.domain.detection.signatures import (
    PYTHON_TRACEBACK,
    CheckpointEvent,
    Classifier,
    CrashSignature,
    ProgressMarker,
    RuleSet,
    Signal,
    ThroughputSample,
    exception_line_index,
    strip_rank_prefix,
)
from app.domain.detection.step_watch import StepWatch, marker_of
from app.jobfiles import safe_open
from app.jobfiles.safe_open import AccessRule, Refused

LINE_CAP = 64 * 1024
HEAD_BYTES = 4096
CHUNK_SIZE = 8 * 1024 * 1024
MAX_BYTES_PER_READ = 256 * 1024 * 1024
TRACEBACK_LOOKAHEAD_LINES = 400
TRACEBACK_WAIT_SECONDS = 30.0
TIMESTAMP_LOOKBACK_LINES = 50
NEWLINE_PIECE = 256 * 1024
NEWLINE_PIECE_MIN = 4096
REUSE_BUFFER_BYTES = 1024 * 1024  # reads at least this big reuse one buffer per call
STRUCTURE_TAIL_LINES = 48  # live reads look for step counters in this many last lines of each chunk
CHECKPOINT_REPEAT_LINES = 30  # lines within which the same kind and iteration are one checkpoint event
MAX_WATCHED_LOGS = 8192  # per-log counter/template state kept for this many paths (least recently read dropped)
_PREADV = getattr(os, "preadv", None)
_Found = TypeVar("_Found")


@dataclass(frozen=True)
class FilePosition:
    """Where reading of one path stopped; store it and pass it back (all fields are plain values)."""

    path: str
    offset: int = 0
    inode: int | None = None
    device: int | None = None
    head_digest: str = ""
    head_length: int = 0
    line_number: int = 0  # complete lines before `offset`
    skipping: bool = False  # inside an over-long line whose start was already handled


@dataclass(frozen=True)
class LogEvent:
    """One line that matters, with where it came from and when it says it was written."""

    path: str
    inode: int | None
    offset: int
    line_number: int
    text: str
    was_truncated: bool
    source_time: datetime | None
    attempt: int | None
    event_id: str
    signal: Signal
    read_at: datetime


@dataclass(frozen=True)
class ReadResult:
    """What one read produced; `position` is where the next read starts."""

    position: FilePosition
    exists: bool
    events: tuple[LogEvent, ...] = ()
    progress: tuple[LogEvent, ...] = ()
    throughput: tuple[LogEvent, ...] = ()
    notes: tuple[str, ...] = ()
    bytes_read: int = 0
    lines_read: int = 0
    last_source_time: datetime | None = None
    file_mtime: datetime | None = None
    read_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    more: bool = False
    refused: Refused | None = None  # the path was not opened (symlink, FIFO, another user's file...): nothing read

    @property
    def latest_progress(self) -> LogEvent | None:
        return self.progress[-1] if self.progress else None

    @property
    def latest_throughput(self) -> LogEvent | None:
        return self.throughput[-1] if self.throughput else None

    @property
    def last_output_at(self) -> datetime | None:
        """When the file last got output, as far as we can tell (source time or modification time)."""
        if not self.bytes_read:
            return self.last_source_time
        times = [t for t in (self.last_source_time, self.file_mtime) if t is not None]
        return max(times) if times else self.read_at


def count_newlines(buf: bytes, start: int, end: int) -> int:
    """Newlines in buf[start:end], the same as buf.count(b"\\n", start, end) but about 3x faster.

    bytes.count checks one byte at a time; bytes.replace finds newlines with memchr, so counting
    what a replace removes from a cache-sized copy of the range is cheaper than counting in place.
    """
    total = 0
    while end - start >= NEWLINE_PIECE_MIN:
        stop = min(end, start + NEWLINE_PIECE)
        piece = buf[start:stop]
        total += len(piece) - len(piece.replace(b"\n", b""))
        start = stop
    return total + buf.count(b"\n", start, end)


class _Lines(NamedTuple):
    """Where a read looks for tail facts: buf[start:complete_end] and the partial line after it.

    buf[0] is at file offset `base`; `line_number` complete lines come before buf index `known_at`.
    """

    buf: bytes
    start: int
    complete_end: int
    base: int
    line_number: int
    known_at: int

    def number_at(self, line_start: int) -> int:
        """The 1-based number of the line starting at buf index `line_start`."""
        if line_start < self.known_at:
            return self.line_number - count_newlines(self.buf, line_start, self.known_at) + 1
        return self.line_number + count_newlines(self.buf, self.known_at, line_start) + 1


def _in_newest_segment(segment: str, classify: Callable[[str], _Found | None]) -> _Found | None:
    """What `classify` finds in the newest part of a line: tqdm-style bars rewrite one line with \\r."""
    for part in reversed(segment.split("\r")):
        found = classify(part)
        if found is not None:
            return found
    return None


def _line_spans(buf: bytes, start: int, end: int) -> list[Span]:
    """Every line of buf[start:end] (end at a line end), empty ones included so indexes count lines."""
    spans: list[Span] = []
    cursor = start
    while cursor < end:
        newline = buf.find(b"\n", cursor, end)
        stop = end if newline < 0 else newline
        spans.append((cursor, stop))
        cursor = stop + 1
    return spans


def _last_spans(buf: bytes, start: int, count: int) -> list[Span]:
    """The last `count` lines of buf[start:] (a partial last line included), oldest first."""
    spans: list[Span] = []
    end = len(buf)
    if end > start and buf[end - 1] == 10:
        end -= 1
    while end > start and len(spans) < count:
        line_start = max(buf.rfind(b"\n", start, end) + 1, start)
        spans.append((line_start, end))
        end = line_start - 1
    spans.reverse()
    return spans


_HELPER_LOOKBACK = 4096  # bytes above srun's exit line searched for the traced command that ran the step


def _arms(event: LogEvent) -> bool:
    """A progress event that arms the hang detector (a step counter seen once without an advance does not)."""
    return isinstance(event.signal, ProgressMarker) and event.signal.arms


def _merged(configured: list[LogEvent], structural: list[LogEvent]) -> list[LogEvent]:
    """Configured events plus structural ones on other lines, in file order (a configured rule wins its line)."""
    if not structural:
        return configured
    taken = {event.offset for event in configured}
    return sorted(configured + [e for e in structural if e.offset not in taken], key=lambda e: e.offset)


def _head_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


@dataclass
class _Batch:
    """What one read of one file found so far, with what the read is of: the start position, stat and time."""

    position: FilePosition
    st: os.stat_result
    read_at: datetime
    events: list[LogEvent] = field(default_factory=list)
    progress: list[LogEvent] = field(default_factory=list)
    throughput: list[LogEvent] = field(default_factory=list)
    last_source_time: datetime | None = None


class LogTailer:
    """Reads files incrementally; keeps the last fd per path open so a rotated file can be finished."""

    def __init__(
        self,
        ruleset: RuleSet | None = None,
        *,
        engine: str = "auto",
        chunk_size: int = CHUNK_SIZE,
        line_cap: int = LINE_CAP,
        max_bytes: int = MAX_BYTES_PER_READ,
        all_progress: bool = False,
        all_throughput: bool = False,
        tz: tzinfo | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        traceback_wait: float = TRACEBACK_WAIT_SECONDS,
        structure: bool = True,
        templates: bool = True,
    ):
        self.ruleset = ruleset or default_ruleset()
        self.classifier = Classifier(self.ruleset)
        self.events_scanner = ChunkScanner(self.ruleset.anchors_of("crash", "checkpoint"), engine=engine)
        self.progress_scanner = ChunkScanner(self.ruleset.anchors_of("progress"), engine=engine)
        self.throughput_scanner = ChunkScanner(self.ruleset.anchors_of("throughput"), engine=engine)
        self.engine = self.events_scanner.engine
        self.chunk_size = max(chunk_size, line_cap * 2)
        self.line_cap = line_cap
        self.max_bytes = max_bytes
        self.all_progress = all_progress
        self.all_throughput = all_throughput
        self.tz = tz or datetime.now().astimezone().tzinfo or UTC
        self.clock = clock
        self.traceback_wait = traceback_wait
        self.structure = structure
        self.templates = templates
        self._watches: OrderedDict[str, StepWatch] = OrderedDict()
        self._last_checkpoint: dict[str, tuple[str, int | None, int]] = {}
        self._fds: dict[str, int] = {}
        # Kept descriptors stay within half the process's open-file limit (20,000 tracked files must not starve the
        # database connections); a file whose descriptor was let go is found again by name or rotated sibling.
        self.max_kept = max(64, resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 2)
        self._local = threading.local()

    # ---- file handles -------------------------------------------------------------------------

    def close(self, path: str | None = None) -> None:
        """Close kept descriptors (one path, or all)."""
        for key in [path] if path is not None else list(self._fds):
            fd = self._fds.pop(key, None) if key is not None else None
            if fd is not None:
                os.close(fd)

    def __enter__(self) -> LogTailer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open_current(self, path: str, access: AccessRule | None) -> tuple[int, os.stat_result] | None:
        """(fd, fstat) of the file at path now; None when missing; with `access` through safe_open (raises Refused)."""
        if access is not None:
            try:
                return safe_open.open_file(path, access)
            except (FileNotFoundError, NotADirectoryError, PermissionError):
                return None
        try:  # offline tools (`recovery check-log FILE`): the user's own file, opened with the user's own rights
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except (FileNotFoundError, NotADirectoryError, PermissionError, IsADirectoryError):
            return None
        return fd, os.fstat(fd)

    def _find_old(self, position: FilePosition, access: AccessRule | None) -> int | None:
        """An fd on the file we were reading, if it still exists: kept fd, or a rotated sibling name (same rule)."""
        fd = self._fds.get(position.path)
        if fd is not None:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) == (position.device, position.inode):
                return fd
        directory = os.path.dirname(position.path) or "."
        try:
            dir_fd = safe_open.open_dir(directory, access) if access is not None else None
        except (OSError, Refused):
            return None
        try:
            with os.scandir(directory if dir_fd is None else dir_fd) as entries:
                for entry in entries:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if (st.st_dev, st.st_ino) != (position.device, position.inode) or not entry.is_file(
                        follow_symlinks=False
                    ):
                        continue
                    if dir_fd is None:
                        return os.open(entry.path, os.O_RDONLY | os.O_NONBLOCK)
                    assert access is not None
                    shown = os.path.join(directory, entry.name)
                    return safe_open.open_at(dir_fd, entry.name, access, shown)[0]
        except (OSError, Refused):
            return None
        finally:
            if dir_fd is not None:
                os.close(dir_fd)
        return None

    def _keep(self, path: str, fd: int) -> None:
        old = self._fds.pop(path, None)
        if old is not None and old != fd:
            os.close(old)
        self._fds[path] = fd  # the newest last: when too many are kept the least recently read one is let go
        while len(self._fds) > self.max_kept:
            os.close(self._fds.pop(next(iter(self._fds))))

    # ---- reading ------------------------------------------------------------------------------

    def read(self, position: FilePosition, *, access: AccessRule | None = None) -> ReadResult:
        """Read what is new at position.path (at most max_bytes; `more` says to call again).

        `access`: whose rights the path is opened with (the collector always passes the job's rule; see
        app/jobfiles/safe_open.py). A refused path reads as missing, with `refused` saying why.
        """
        read_at = self.clock()
        path = position.path
        refused: Refused | None = None
        try:
            current = self._open_current(path, access)
        except Refused as exc:
            current, refused = None, exc
        result = self._read_current(position, current, access, read_at)
        return replace(result, refused=refused) if refused is not None else result

    def read_buffer(self, path: str, data: bytes, *, line_number: int = 0) -> list[ReadResult]:
        """Classify lines held in memory (pushed ones) as the reader classifies a file's: an in-memory fd, read whole.

        Give the tailer `traceback_wait=0`: nothing more arrives behind these bytes, so a traceback whose
        exception line is not among them is classified by its first line instead of waiting.
        """
        fd = os.memfd_create("recovery-pushed", os.MFD_CLOEXEC)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            st = os.fstat(fd)
            read_at = self.clock()
            position = FilePosition(path=path, inode=st.st_ino, device=st.st_dev, line_number=line_number)
            results: list[ReadResult] = []
            while True:
                result = self._read_fd(fd, st, position, read_at, [])
                results.append(result)
                if result.position.offset >= st.st_size or result.position.offset <= position.offset:
                    return results
                position = result.position
        finally:
            os.close(fd)

    def _read_current(
        self,
        position: FilePosition,
        current: tuple[int, os.stat_result] | None,
        access: AccessRule | None,
        read_at: datetime,
    ) -> ReadResult:
        path = position.path
        notes: list[str] = []
        if position.inode is not None and (
            current is None or (current[1].st_dev, current[1].st_ino) != (position.device, position.inode)
        ):
            # Rotated, replaced or deleted: finish the old file first when we still can.
            if current is not None:
                os.close(current[0])
            old_fd = self._find_old(position, access)
            if old_fd is not None:
                st = os.fstat(old_fd)
                result = self._read_fd(old_fd, st, position, read_at, notes)
                if result.more:
                    self._keep(path, old_fd)
                    return result
                if self._fds.get(path) == old_fd:
                    del self._fds[path]
                os.close(old_fd)
                notes = ["rotated" if current is not None else "deleted"]
                return replace(
                    result,
                    position=FilePosition(path=path),
                    notes=tuple(result.notes) + tuple(notes),
                    more=current is not None,
                )
            notes.append("rotated" if current is not None else "deleted")
            notes.append("old-file-remainder-lost")
            position = FilePosition(path=path)
            if current is None:
                return ReadResult(position=position, exists=False, notes=tuple(notes), read_at=read_at)
            try:
                current = self._open_current(path, access)
            except Refused:
                current = None
        if current is None:
            return ReadResult(position=position, exists=False, notes=("missing",), read_at=read_at)
        fd, st = current
        self._keep(path, fd)
        if position.inode is None:
            position = FilePosition(path=path, inode=st.st_ino, device=st.st_dev)
        elif st.st_size < position.offset or (
            position.head_length and _head_digest(os.pread(fd, position.head_length, 0)) != position.head_digest
        ):
            notes.append("truncated")
            position = FilePosition(path=path, inode=st.st_ino, device=st.st_dev)
        return self._read_fd(fd, st, position, read_at, notes)

    def _read_fd(
        self, fd: int, st: os.stat_result, position: FilePosition, read_at: datetime, notes: list[str]
    ) -> ReadResult:
        size = st.st_size
        mtime = datetime.fromtimestamp(st.st_mtime, UTC)
        idle = (read_at - mtime).total_seconds()
        batch = _Batch(position, st, read_at)
        offset, line_number, skipping = position.offset, position.line_number, position.skipping
        budget_end = min(size, offset + self.max_bytes)
        bytes_read = 0
        while offset < budget_end:
            want = min(self.chunk_size, budget_end - offset)
            buf: bytes
            if want == self.chunk_size >= REUSE_BUFFER_BYTES and _PREADV is not None:
                # Full chunks go into one reused buffer (per thread): a fresh multi-megabyte bytes per
                # pread costs page faults that took as long as the prefilter scan. Nothing keeps a
                # reference to buf past this iteration (lines are sliced out as copies), and the code
                # below only reads it, through the methods bytes and bytearray share.
                scratch: bytearray | None = getattr(self._local, "scratch", None)
                if scratch is None:
                    scratch = self._local.scratch = bytearray(want)
                got = _PREADV(fd, [scratch], offset)
                buf = cast(bytes, scratch) if got == want else bytes(scratch[:got])
            else:
                buf = os.pread(fd, want, offset)
            if not buf:
                break
            bytes_read += len(buf)
            at_tail = offset + len(buf) >= size
            start = 0
            if skipping:
                newline = buf.find(b"\n")
                if newline < 0:
                    offset += len(buf)
                    self._tail_facts(_Lines(buf, 0, 0, offset - len(buf), line_number, 0), batch)
                    continue
                start, skipping, line_number = newline + 1, False, line_number + 1
            last_newline = buf.rfind(b"\n", start)
            if last_newline < 0:
                if len(buf) - start >= self.line_cap or (not at_tail and len(buf) - start >= self.chunk_size // 2):
                    # A line longer than the cap: keep its first line_cap bytes, drop the rest until its newline.
                    self._events(
                        buf, start, start + self.line_cap, offset, line_number, batch, at_tail, idle, forced_end=True
                    )
                    self._tail_facts(_Lines(buf, start, start + self.line_cap, offset, line_number, start), batch)
                    offset += len(buf)
                    skipping = True
                    continue
                self._tail_facts(_Lines(buf, start, start, offset, line_number, start), batch)
                break  # a partial last line: wait for its newline
            cut, counted_to, lines_at = self._events(
                buf, start, last_newline + 1, offset, line_number, batch, at_tail, idle
            )
            line_number = lines_at + count_newlines(buf, counted_to, cut)  # one newline pass per chunk in total
            self._tail_facts(_Lines(buf, start, cut, offset, line_number, cut), batch)
            offset += cut
            if cut < last_newline + 1:
                if at_tail or cut == start:
                    break  # waiting for a traceback's exception line
        head = position.head_length
        digest = position.head_digest
        if head < HEAD_BYTES and size > head:
            head = min(HEAD_BYTES, size)
            digest = _head_digest(os.pread(fd, head, 0))
        new_position = replace(
            position,
            offset=offset,
            line_number=line_number,
            skipping=skipping,
            head_length=head,
            head_digest=digest,
            inode=st.st_ino,
            device=st.st_dev,
        )
        return ReadResult(
            position=new_position,
            exists=True,
            events=tuple(batch.events),
            progress=tuple(batch.progress),
            throughput=tuple(batch.throughput),
            notes=tuple(notes),
            bytes_read=bytes_read,
            lines_read=line_number - position.line_number,
            last_source_time=batch.last_source_time,
            file_mtime=mtime,
            read_at=read_at,
            more=offset < size and budget_end < size,
        )

    def _event(
        self,
        raw: bytes,
        text: str,
        truncated: bool,
        file_offset: int,
        line_number: int,
        batch: _Batch,
        signal: Signal,
    ) -> LogEvent:
        position, st, read_at = batch.position, batch.st, batch.read_at
        return LogEvent(
            path=position.path,
            inode=st.st_ino,
            offset=file_offset,
            line_number=line_number,
            text=text,
            was_truncated=truncated,
            source_time=parse_timestamp(text, now=read_at, default_tz=self.tz),
            attempt=attempt_label(text),
            event_id=event_identity(position.path, st.st_ino, file_offset, raw),
            signal=signal,
            read_at=read_at,
        )

    def _events(
        self,
        buf: bytes,
        start: int,
        end: int,
        base: int,
        line_number: int,
        batch: _Batch,
        at_tail: bool,
        idle: float,
        forced_end: bool = False,
    ) -> tuple[int, int, int]:
        """Classify candidate lines of buf[start:end].

        Returns (consumed up to, newlines counted up to, line number there) so the caller finishes
        the newline count without a second pass.
        """
        counted_to, lines_before = start, line_number
        suppressed: set[int] = set()
        for line_start, line_end, anchors in self.events_scanner.lines_with_anchors(buf, start, end):
            if forced_end:
                line_end = min(line_end, start + self.line_cap)
            raw = buf[line_start : min(line_end, line_start + self.line_cap)]
            truncated = forced_end or line_end - line_start > self.line_cap
            text = decode_line(raw)
            signal: Signal | None
            if line_start in suppressed:
                # A traceback's exception line: its crash is the traceback's, but a load it names ("failed to
                # resume from checkpoint <path>") was still an attempt to resume from that checkpoint.
                signal = self.classifier.checkpoint(text)
                if signal is None or signal.kind != "loaded":
                    continue
            else:
                signal = self.classifier.candidate(text, anchors)
                if isinstance(signal, CrashSignature) and signal.rule == "srun_task_exited":
                    above = buf[max(0, line_start - _HELPER_LOOKBACK) : line_start].split(b"\n")[:-1]
                    if helper_step_exit(text, (decode_line(line) for line in reversed(above))):
                        continue  # a helper step run inside $(...): the batch script goes on after it
            if (
                isinstance(signal, CrashSignature)
                and signal.category == PYTHON_TRACEBACK
                and signal.rule == "python_traceback"
            ):
                decided = self._traceback(buf, line_end, end, text, suppressed)
                if decided is None:
                    waiting = at_tail and idle < self.traceback_wait
                    if line_start > start or waiting:
                        lines_before += count_newlines(buf, counted_to, line_start)
                        return line_start, line_start, lines_before  # let the exception line arrive
                else:
                    signal = decided
            if signal is not None:
                # Line numbers only for lines that become events: most candidates are benign.
                lines_before += count_newlines(buf, counted_to, line_start)
                counted_to = line_start
                if isinstance(signal, CheckpointEvent) and signal.kind == "loaded" and signal.iteration is not None:
                    self._watch(batch.position.path).resumed(signal.iteration, offset=base + line_start)
                if isinstance(signal, CheckpointEvent) and (
                    self._names_its_step(batch.position.path, signal, lines_before + 1, batch)
                    or self._repeated(batch.position.path, signal, lines_before + 1)
                ):
                    continue
                batch.events.append(
                    self._event(raw, text, truncated, base + line_start, lines_before + 1, batch, signal)
                )
                load = self._load_in_crash(text, signal)
                if load is not None:
                    # "ValueError: failed to resume from checkpoint <path>": the crash, and the attempt to load
                    if load.iteration is not None:
                        self._watch(batch.position.path).resumed(load.iteration, offset=base + line_start)
                    twin = self._event(raw, text, truncated, base + line_start, lines_before + 1, batch, load)
                    # the same line's second event: its own stable id, never the crash's
                    key = hashlib.sha256(f"{twin.event_id}\0load".encode()).hexdigest()[:32]
                    batch.events.append(replace(twin, event_id=key))
        return end, counted_to, lines_before

    def _load_in_crash(self, text: str, signal: Signal) -> CheckpointEvent | None:
        """The checkpoint load a crash line names (a resume that failed was still an attempt to load it)."""
        if not isinstance(signal, CrashSignature) or "heckpoint" not in text and "ckpt" not in text:
            return None
        event = self.classifier.checkpoint(text)
        return event if event is not None and event.kind == "loaded" else None

    def _traceback(
        self, buf: bytes, after: int, end: int, start_text: str, suppressed: set[int]
    ) -> CrashSignature | None:
        """Find the traceback's final exception line in buf[after+1:end]; its category decides."""
        prefix, _ = strip_rank_prefix(start_text)
        starts: list[int] = []
        lines: list[str] = []
        cursor = after + 1
        while cursor < end and len(lines) < TRACEBACK_LOOKAHEAD_LINES + 1:
            newline = buf.find(b"\n", cursor, end)
            if newline < 0:
                break
            starts.append(cursor)
            lines.append(decode_line(buf[cursor : min(newline, cursor + self.line_cap)]))
            cursor = newline + 1
        index = exception_line_index(lines, prefix=prefix, limit=TRACEBACK_LOOKAHEAD_LINES)
        if index is None:
            if len(lines) > TRACEBACK_LOOKAHEAD_LINES:
                return self.classifier.traceback_category(start_text)
            return None
        suppressed.add(starts[index])
        return self.classifier.traceback_category(lines[index])

    def _tail_facts(
        self,
        lines: _Lines,
        batch: _Batch,
    ) -> None:
        """Latest progress marker, throughput and source time in buf[start:] (partial last line included)."""
        found_progress = self._latest(self.progress_scanner, self._progress_of, lines, batch)
        found_rate = self._latest(self.throughput_scanner, self._throughput_of, lines, batch, every=self.all_throughput)
        if self.structure:
            found_steps = self._steps(lines, batch)
            # A configured marker or rate rule on the same line wins (the operator's rule says what it is).
            shown = [event for event, _ in found_steps if self.all_progress or _arms(event)]
            found_progress = _merged(found_progress, shown)
            samples = [replace(e, signal=ThroughputSample(rates, ("structure",))) for e, rates in found_steps if rates]
            found_rate = _merged(found_rate, samples if self.all_throughput else samples[-1:])
        batch.progress.extend(found_progress)
        batch.throughput.extend(found_rate)
        if not self.all_progress and len(batch.progress) > 1:
            del batch.progress[:-1]
        if not self.all_throughput and len(batch.throughput) > 1:
            del batch.throughput[:-1]
        stamp = self._last_timestamp(lines.buf, lines.start, batch.read_at)
        if stamp is not None and (batch.last_source_time is None or stamp >= batch.last_source_time):
            batch.last_source_time = stamp

    def _names_its_step(self, path: str, event: CheckpointEvent, line_number: int, batch: _Batch) -> bool:
        """True when this line names the step of the checkpoint event just before it, still in this read's batch.

        mmcv prints "load checkpoint from .../epoch_17.pth" then "resumed epoch 7, iter 49231": one load, whose
        step only the second line names. The first line's event gets the iteration; the second is not another load.
        """
        previous = self._last_checkpoint.get(path)
        if event.iteration is None or previous is None:
            return False
        kind, iteration, line = previous
        if kind != event.kind or iteration is not None or not 0 <= line_number - line <= CHECKPOINT_REPEAT_LINES:
            return False
        for index in range(len(batch.events) - 1, -1, -1):
            earlier = batch.events[index]
            if earlier.line_number == line and isinstance(earlier.signal, CheckpointEvent):
                batch.events[index] = replace(earlier, signal=replace(earlier.signal, iteration=event.iteration))
                self._last_checkpoint[path] = (kind, event.iteration, line_number)
                return True
        return False

    def _repeated(self, path: str, event: CheckpointEvent, line_number: int) -> bool:
        """True when this line is one more line about the checkpoint event just recorded for this path.

        One load (or save) is often printed several times: "loading checkpoint ... at iteration N" then
        "successfully loaded ... at iteration N", HF's "Saving model checkpoint to .../checkpoint-5" then
        "Configuration saved in .../checkpoint-5/config.json", or every rank printing the same line. Same
        kind, within CHECKPOINT_REPEAT_LINES lines, and the same iteration (or none named) is the same event.
        """
        previous = self._last_checkpoint.get(path)
        self._last_checkpoint[path] = (event.kind, event.iteration, line_number)
        if len(self._last_checkpoint) > MAX_WATCHED_LOGS:
            self._last_checkpoint.pop(next(iter(self._last_checkpoint)))
        if previous is None:
            return False
        kind, iteration, line = previous
        same = kind == event.kind and 0 <= line_number - line <= CHECKPOINT_REPEAT_LINES
        if same and (event.iteration is None or event.iteration == iteration):
            self._last_checkpoint[path] = previous if event.iteration is None else (kind, iteration, line_number)
            return True
        return False

    def _watch(self, path: str) -> StepWatch:
        """The path's counter and template state (kept across reads, bounded in number of paths)."""
        watch = self._watches.get(path)
        if watch is None:
            watch = self._watches[path] = StepWatch(templates=self.templates)
            if len(self._watches) > MAX_WATCHED_LOGS:
                self._watches.popitem(last=False)
        else:
            self._watches.move_to_end(path)
        return watch

    def _steps(
        self,
        lines: _Lines,
        batch: _Batch,
    ) -> list[tuple[LogEvent, dict[str, float]]]:
        """Progress by structure: counter lines with their rates (one parse gives both), oldest first.

        Offline reads (all_progress) look at every complete line and give every counter line (`arms` says
        which arm). Live reads look at the last STRUCTURE_TAIL_LINES lines of the chunk only (partial last
        line included: a bar may never end its line) and give the newest counter line; the counters' last
        values persist per path, so an advance is seen across reads.
        """
        buf, start, complete_end, base, line_number, known_at = lines
        watch = self._watch(batch.position.path)
        if self.all_progress:
            spans = _line_spans(buf, start, complete_end)
            lines_before = line_number - count_newlines(buf, start, known_at)
            found: list[tuple[LogEvent, dict[str, float]]] = []
            for index, (line_start, line_end) in enumerate(spans):
                if line_end > line_start:
                    raw = buf[max(line_start, line_end - self.line_cap) : line_end]
                    text = decode_line(raw)
                    observed = watch.observe(text, offset=base + line_start)
                    if observed is not None:
                        marker, counter = observed
                        number = lines_before + index + 1
                        event = self._step_event(raw, text, line_start, line_end, number, marker, base, batch)
                        found.append((event, rates_of(counter.fields)))
            return found
        spans = _last_spans(buf, start, STRUCTURE_TAIL_LINES)
        # Newest first: the newest counter line and the one before it of the same counter (in a log that
        # prints progress densely, two lines parsed per chunk); the tracker remembers values across reads.
        newest: tuple[int, int, bytes, str, StepReading] | None = None
        older: StepReading | None = None
        for line_start, line_end in reversed(spans):
            if line_end <= line_start:
                continue
            raw = buf[max(line_start, line_end - self.line_cap) : line_end]
            text = decode_line(raw)
            reading = parse_bar_line(text)
            if reading is None:
                continue
            if newest is None:
                newest = (line_start, line_end, raw, text, reading)
            elif reading.key == newest[4].key:
                older = reading
                break
        seen: tuple[ProgressMarker, StepReading] | None = None
        if newest is not None:
            if older is not None:
                watch.tracker.advanced(older)
            line_start, line_end, raw, text, reading = newest
            seen = marker_of(reading, arms=watch.arms(reading, offset=base + line_start)), reading
        else:
            # No counter a parser knows: the template miner and metrics lines learn from the tail, oldest first.
            for span_start, span_end in spans:
                if span_end <= span_start:
                    continue
                span_raw = buf[max(span_start, span_end - self.line_cap) : span_end]
                span_text = decode_line(span_raw)
                found_here = watch.without_counter(span_text.rsplit("\r", 1)[-1])
                if found_here is not None:
                    line_start, line_end, raw, text, seen = span_start, span_end, span_raw, span_text, found_here
        if seen is None:
            return []
        number = lines.number_at(line_start)
        marker, reading = seen
        event = self._step_event(raw, text, line_start, line_end, number, marker, base, batch)
        return [(event, rates_of(reading.fields))]

    def _step_event(
        self,
        raw: bytes,
        text: str,
        line_start: int,
        line_end: int,
        number: int,
        marker: ProgressMarker,
        base: int,
        batch: _Batch,
    ) -> LogEvent:
        truncated = line_end - line_start > self.line_cap
        return self._event(raw, text, truncated, base + line_start, number, batch, marker)

    def _progress_of(self, segment: str) -> ProgressMarker | None:
        return _in_newest_segment(segment, self.classifier.progress)

    def _throughput_of(self, segment: str) -> ThroughputSample | None:
        return _in_newest_segment(segment, self.classifier.throughput)

    def _latest(
        self,
        scanner: ChunkScanner,
        classify: Callable[[str], Signal | None],
        lines: _Lines,
        batch: _Batch,
        every: bool | None = None,
    ) -> list[LogEvent]:
        buf, start, complete_end, base, line_number, known_at = lines
        every = self.all_progress if every is None else every
        # Offline (every=True) counts only complete lines so nothing is counted twice; the live
        # path also looks at the partial last line, since a progress bar may never end its line.
        spans: Iterable[Span] = scanner.lines(buf, start, complete_end) if every else scanner.last_lines(buf, start)
        found: list[LogEvent] = []
        # `line_number` is the number of complete lines before buf index `known_at`.
        counted_to, lines_before = start, line_number - count_newlines(buf, start, known_at) if every else line_number
        for line_start, line_end in spans:
            raw = buf[max(line_start, line_end - self.line_cap) : line_end]  # the tail holds the newest bar state
            signal = classify(decode_line(raw))
            if signal is None:
                continue
            if every:
                lines_before += count_newlines(buf, counted_to, line_start)
                counted_to = line_start
                number = lines_before + 1
            else:
                number = lines.number_at(line_start)
            truncated = line_end - line_start > self.line_cap
            found.append(self._event(raw, decode_line(raw), truncated, base + line_start, number, batch, signal))
            if not every:
                break
        return found

    def _last_timestamp(self, buf: bytes, start: int, read_at: datetime) -> datetime | None:
        end = len(buf)
        for _ in range(TIMESTAMP_LOOKBACK_LINES):
            if end <= start:
                return None
            line_start = buf.rfind(b"\n", start, end - 1) + 1
            line_start = max(line_start, start)
            stamp = parse_timestamp(
                decode_line(buf[line_start : min(end, line_start + 400)]), now=read_at, default_tz=self.tz
            )
            if stamp is not None:
                return stamp
            end = line_start
        return None
