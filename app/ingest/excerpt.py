"""The log view's excerpt of a pushed log source: the kept lines around one line number, from the database."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from app.evidence.models import LogSource
from app.ingest import queries
from app.jobfiles.excerpt import CONTEXT_LINES, MAX_EXCERPT_BYTES, MAX_LINE_CHARS, Excerpt


async def pushed_excerpt(
    session: AsyncSession, source: LogSource, line: int, *, context: int = CONTEXT_LINES
) -> Excerpt:
    """Lines `line-context`..`line+context` of what was pushed on `source` and is still kept (the retention)."""
    line = max(1, line)
    first, last = max(1, line - context), line + context
    out = Excerpt(path=source.path, target=line, first=first)
    rows = await queries.pushed_lines_between(session, log_source_id=source.id, first=first, last=last)
    numbered: list[tuple[int, str]] = []
    for row in rows:
        start = row.line_number or 0
        numbered.extend((start + offset, text) for offset, text in enumerate(row.line.split("\n")))
    shown = [(n, text) for n, text in numbered if first <= n <= last]
    if not shown:
        out.problem = "no pushed line is kept there (not pushed yet, or past the retention)"
        return out
    out.first = shown[0][0]
    size = 0
    expected = out.first
    for number, text in shown:
        if number != expected or size > MAX_EXCERPT_BYTES:
            out.truncated = size > MAX_EXCERPT_BYTES
            break  # a gap (an entry cut at the kept length) ends the window: numbers after it would be wrong
        out.cut.append(len(text) > MAX_LINE_CHARS)
        out.lines.append(text[:MAX_LINE_CHARS])
        size += len(text.encode("utf-8", "replace")) + 1
        expected += 1
    if out.first + len(out.lines) - 1 < line:
        out.problem = f"only lines up to {out.first + len(out.lines) - 1} are kept"
    return out
