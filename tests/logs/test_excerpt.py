"""The log view's excerpt: ±50 lines around a line, bounded, decoded safely, honest when the file changed."""

from __future__ import annotations

from pathlib import Path

from app.logs import excerpt


def _log(tmp_path: Path, lines: int) -> Path:
    path = tmp_path / "train.out"
    path.write_bytes(b"".join(f"line {n}\n".encode() for n in range(1, lines + 1)))
    return path


def test_fifty_lines_either_side(tmp_path: Path) -> None:
    found = excerpt.read_excerpt(str(_log(tmp_path, 500)), 200)
    assert found.problem is None and found.first == 150 and len(found.lines) == 101
    assert found.lines[0] == "line 150" and found.lines[50] == "line 200" and found.lines[-1] == "line 250"


def test_near_the_start_and_the_end(tmp_path: Path) -> None:
    path = str(_log(tmp_path, 60))
    start = excerpt.read_excerpt(path, 3)
    assert start.first == 1 and start.lines[0] == "line 1" and start.lines[-1] == "line 53"
    end = excerpt.read_excerpt(path, 60)
    assert end.lines[-1] == "line 60" and end.problem is None


def test_line_past_the_end_says_so(tmp_path: Path) -> None:
    found = excerpt.read_excerpt(str(_log(tmp_path, 10)), 400)
    assert found.lines == [] and "only 10 line(s)" in (found.problem or "")
    found = excerpt.read_excerpt(str(_log(tmp_path, 10)), 40)
    assert len(found.lines) == 10 and "only 10 line(s)" in (found.problem or "")


def test_missing_file_long_lines_and_bad_bytes(tmp_path: Path) -> None:
    assert "no longer exists" in (excerpt.read_excerpt(str(tmp_path / "gone.out"), 1).problem or "")
    path = tmp_path / "odd.out"
    path.write_bytes(b"x" * 5000 + b"\n\xff\xfe bad utf-8\r\n")
    found = excerpt.read_excerpt(str(path), 2)
    assert found.cut == [True, False] and len(found.lines[0]) == excerpt.MAX_LINE_CHARS
    assert found.lines[1] == "\ufffd\ufffd bad utf-8"


def test_excerpt_is_bounded_in_bytes(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(excerpt, "MAX_EXCERPT_BYTES", 100)
    found = excerpt.read_excerpt(str(_log(tmp_path, 500)), 100)
    assert found.truncated and sum(len(x) + 1 for x in found.lines) <= 101
