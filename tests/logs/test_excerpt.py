"""The log view's excerpt: ±50 lines around a line, bounded, decoded safely, honest when the file changed."""

from __future__ import annotations

import os
from pathlib import Path

from app.jobfiles import excerpt
from app.jobfiles.safe_open import AccessRule

MINE = AccessRule(uid=os.getuid())


def read(path: str, line: int) -> excerpt.Excerpt:
    return excerpt.read_excerpt(path, line, access=MINE)


def _log(tmp_path: Path, lines: int) -> Path:
    path = tmp_path / "train.out"
    path.write_bytes(b"".join(f"line {n}\n".encode() for n in range(1, lines + 1)))
    return path


def test_fifty_lines_either_side(tmp_path: Path) -> None:
    found = read(str(_log(tmp_path, 500)), 200)
    assert found.problem is None and found.first == 150 and len(found.lines) == 101
    assert found.lines[0] == "line 150" and found.lines[50] == "line 200" and found.lines[-1] == "line 250"


def test_near_the_start_and_the_end(tmp_path: Path) -> None:
    path = str(_log(tmp_path, 60))
    start = read(path, 3)
    assert start.first == 1 and start.lines[0] == "line 1" and start.lines[-1] == "line 53"
    end = read(path, 60)
    assert end.lines[-1] == "line 60" and end.problem is None


def test_line_past_the_end_says_so(tmp_path: Path) -> None:
    found = read(str(_log(tmp_path, 10)), 400)
    assert found.lines == [] and "only 10 line(s)" in (found.problem or "")
    found = read(str(_log(tmp_path, 10)), 40)
    assert len(found.lines) == 10 and "only 10 line(s)" in (found.problem or "")


def test_missing_file_long_lines_and_bad_bytes(tmp_path: Path) -> None:
    assert "no longer exists" in (read(str(tmp_path / "gone.out"), 1).problem or "")
    path = tmp_path / "odd.out"
    path.write_bytes(b"x" * 5000 + b"\n\xff\xfe bad utf-8\r\n")
    found = read(str(path), 2)
    assert found.cut == [True, False] and len(found.lines[0]) == excerpt.MAX_LINE_CHARS
    assert found.lines[1] == "\ufffd\ufffd bad utf-8"


def test_excerpt_is_bounded_in_bytes(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(excerpt, "MAX_EXCERPT_BYTES", 100)
    found = read(str(_log(tmp_path, 500)), 100)
    assert found.truncated and sum(len(x) + 1 for x in found.lines) <= 101


def test_lines_across_chunk_boundaries_are_found_exactly(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(excerpt, "CHUNK", 4096 * 3 + 17)  # lines straddle chunk ends at odd places
    path = tmp_path / "many.out"
    path.write_bytes(b"".join(f"line {n}\n".encode() for n in range(1, 40001)))
    for target in (51, 52, 1234, 9999, 27001, 39950):
        found = read(str(path), target)
        assert found.problem is None, found.problem
        assert found.lines[target - found.first] == f"line {target}"
        assert found.lines[0] == f"line {target - 50}"
    blank = tmp_path / "blank.out"
    blank.write_bytes(b"\n" * 100_000 + b"last\n")
    found = read(str(blank), 100_001)
    assert found.lines[-1] == "last" and found.first == 99_951


def test_the_file_must_still_be_the_one_the_collector_read(tmp_path: Path) -> None:
    path = _log(tmp_path, 10)
    st = os.stat(path)
    assert excerpt.read_excerpt(str(path), 2, access=MINE, accepted=(st.st_dev, st.st_ino)).problem is None
    other = excerpt.read_excerpt(str(path), 2, access=MINE, accepted=(st.st_dev, st.st_ino + 1))
    assert other.lines == [] and "changed" in (other.problem or "")


def test_a_symlink_or_another_users_file_is_not_shown(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("TOP-SECRET\n")
    link = tmp_path / "train.out"
    link.symlink_to(secret)
    found = read(str(link), 1)
    assert found.lines == [] and found.refused == "symlink" and "TOP-SECRET" not in repr(found)
    found = excerpt.read_excerpt(str(secret), 1, access=AccessRule(uid=os.getuid() + 4242))
    assert found.lines == [] and found.refused == "wrong-owner"
