"""Find candidate lines in large byte chunks by literal anchors, without looking at every line.

One multi-literal search runs over the whole chunk (Hyperscan when the `hyperscan` wheel is
importable, else one `bytes.find` sweep per literal) and reports the lines that
contain an anchor; only those lines get the precise per-line classification. For markers that
appear on nearly every line (progress, throughput) `last_lines` searches backwards from the
chunk end in growing windows, so finding the latest one costs a few kilobytes, not the chunk.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

_hyperscan: Any
try:  # Optional accelerator: a wheel on PyPI; the pure-re path below gives the same answers.
    _hyperscan = importlib.import_module("hyperscan")
except ImportError:  # pragma: no cover - exercised by forcing engine="python" in tests
    _hyperscan = None

HYPERSCAN_AVAILABLE = _hyperscan is not None
FIRST_WINDOW = 4 * 1024

Span = tuple[int, int]  # (line start, line end without the newline)


def _hs_literal(anchor: bytes) -> bytes:
    """Escape every byte so Hyperscan reads the anchor as a plain literal."""
    return b"".join(
        bytes([b]) if (48 <= b <= 57 or 65 <= b <= 90 or 97 <= b <= 122) else b"\\x%02x" % b for b in anchor
    )


class ChunkScanner:
    """Multi-literal prefilter over byte chunks; returns the spans of lines containing an anchor."""

    def __init__(self, anchors: Sequence[str], *, engine: str = "auto"):
        # An anchor may END with a newline (" nan\n": a value at the end of its line); a line is found
        # from where its anchor ends, so the newline is the line's own end.
        encoded = [a.encode("utf-8") for a in dict.fromkeys(anchors) if a.rstrip("\n") and "\n" not in a.rstrip("\n")]
        self.anchors: tuple[bytes, ...] = tuple(encoded)
        if engine == "auto":
            engine = "hyperscan" if HYPERSCAN_AVAILABLE else "python"
        if engine == "hyperscan" and not HYPERSCAN_AVAILABLE:
            raise RuntimeError("hyperscan is not installed")
        self.engine = engine
        self._db = None
        self._local = threading.local()
        texts = [a.decode("utf-8") for a in self.anchors]
        # Each anchor also stands for the shorter anchors inside it, so a rule keyed on the
        # shorter one is still tried whichever of two overlapping matches is reported.
        self._names: list[frozenset[str]] = [frozenset(t for t in texts if t in text) for text in texts]
        self._index = {a: i for i, a in enumerate(self.anchors)}
        # An anchor that contains another one finds no line the shorter one misses: only the minimal
        # anchors are searched (fewer literals scan faster) and the longer ones are looked for in the
        # lines found, so each line still reports every anchor it holds.
        inside = [[j for j, o in enumerate(self.anchors) if j != i and o in a] for i, a in enumerate(self.anchors)]
        self._searched: list[int] = [i for i, contained in enumerate(inside) if not contained]
        longer: list[list[tuple[bytes, int]]] = [[] for _ in self.anchors]
        for j, contained in enumerate(inside):
            for i in contained:
                longer[i].append((self.anchors[j], j))
        self._longer: list[tuple[tuple[bytes, int], ...]] = [tuple(entry) for entry in longer]
        if not self.anchors:
            return
        if engine == "hyperscan":
            db = _hyperscan.Database(mode=_hyperscan.HS_MODE_BLOCK)
            db.compile(
                expressions=[_hs_literal(self.anchors[i]) for i in self._searched],
                ids=list(self._searched),
                elements=len(self._searched),
                flags=[0] * len(self._searched),
            )
            self._db = db

    def _scratch(self) -> Any:
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = _hyperscan.Scratch(self._db)
        return scratch

    def match_ends(self, buf: bytes, start: int = 0, end: int | None = None) -> list[int]:
        """Absolute end offsets of the minimal anchors' occurrences in buf[start:end], ascending.

        Every line holding an anchor holds a minimal one (an anchor containing no other anchor).
        """
        end = len(buf) if end is None else end
        if not self.anchors or end <= start:
            return []
        if self._db is not None:
            found: list[int] = []
            append = found.append
            view: Any = memoryview(buf)[start:end] if (start or end != len(buf)) else buf
            self._db.scan(
                view, match_event_handler=lambda _id, _from, to, _flags, _ctx: append(to), scratch=self._scratch()
            )
            if start:
                found = [start + off for off in found]
            found.sort()
            return found
        return [off for off, _ in self._find_all(buf, start, end)]

    def _find_all(self, buf: bytes, start: int, end: int) -> list[tuple[int, int]]:
        """Pure-Python path: one bytes.find sweep per anchor (measured ~5x faster than an re alternation)."""
        hits: list[tuple[int, int]] = []
        for ident in self._searched:
            anchor = self.anchors[ident]
            size = len(anchor)
            found = buf.find(anchor, start, end)
            while found >= 0:
                hits.append((found + size, ident))
                found = buf.find(anchor, found + 1, end)
        hits.sort()
        return hits

    def lines(self, buf: bytes, start: int = 0, end: int | None = None) -> list[Span]:
        """Spans of the distinct lines in buf[start:end] that contain at least one anchor."""
        end = len(buf) if end is None else end
        spans: list[Span] = []
        line_end = -1
        for off in self.match_ends(buf, start, end):
            if off <= line_end:
                continue  # another anchor on a line we already have
            line_start = buf.rfind(b"\n", start, off - 1) + 1
            if line_start < start:
                line_start = start
            newline = buf.find(b"\n", off - 1, end)
            line_end = end if newline < 0 else newline
            spans.append((line_start, line_end))
        return spans

    def lines_with_anchors(
        self, buf: bytes, start: int = 0, end: int | None = None
    ) -> list[tuple[int, int, frozenset[str]]]:
        """Like `lines`, plus the anchors seen on each line (lets the classifier try only their rules)."""
        end = len(buf) if end is None else end
        if not self.anchors or end <= start:
            return []
        hits: list[tuple[int, int]] = []  # (end offset, anchor index)
        if self._db is not None:
            append = hits.append
            view: Any = memoryview(buf)[start:end] if (start or end != len(buf)) else buf
            self._db.scan(
                view,
                match_event_handler=lambda ident, _from, to, _flags, _ctx: append((start + to, ident)),
                scratch=self._scratch(),
            )
            hits.sort()
        else:
            hits = self._find_all(buf, start, end)
        result: list[tuple[int, int, frozenset[str]]] = []
        names, longer_of = self._names, self._longer
        line_start = line_end = -1
        seen: frozenset[str] = frozenset()
        for off, ident in hits:
            if off > line_end:
                if seen:
                    result.append((line_start, line_end, seen))
                line_start = max(buf.rfind(b"\n", start, off - 1) + 1, start)
                newline = buf.find(b"\n", off - 1, end)
                line_end = end if newline < 0 else newline
                seen = names[ident]  # shared, not copied: most candidate lines hold one anchor
            else:
                seen |= names[ident]
            for longer, other in longer_of[ident]:
                if buf.find(longer, line_start, line_end) >= 0:
                    seen |= names[other]
        if seen:
            result.append((line_start, line_end, seen))
        return result

    def last_lines(self, buf: bytes, start: int = 0, end: int | None = None) -> Iterator[Span]:
        """Candidate lines of buf[start:end], newest first, searching backwards in growing windows."""
        end = len(buf) if end is None else end
        upper = end
        window = FIRST_WINDOW
        while upper > start:
            lower = max(start, upper - window)
            if lower > start:
                lower = buf.rfind(b"\n", start, lower) + 1  # snap to a line start: no anchor spans the cut
                if lower <= start:
                    lower = start
            yield from reversed(self.lines(buf, lower, upper))
            upper = lower
            window *= 4
