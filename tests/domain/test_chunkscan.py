"""The multi-literal prefilter: the same lines with hyperscan and with the pure-Python sweep."""

from __future__ import annotations

import pytest

from app.domain.detection.chunkscan import HYPERSCAN_AVAILABLE, ChunkScanner

TEXT = b"ok line\nCUDA error: out of memory here\nplain\nNCCL WARN x and CUDA error: again\nlast NCCL"
ENGINES = ["python"] + (["hyperscan"] if HYPERSCAN_AVAILABLE else [])


@pytest.mark.parametrize("engine", ENGINES)
def test_lines_holding_an_anchor(engine: str) -> None:
    scanner = ChunkScanner(["CUDA error:", "NCCL"], engine=engine)
    spans = scanner.lines(TEXT)
    assert [TEXT[a:b] for a, b in spans] == [
        b"CUDA error: out of memory here",
        b"NCCL WARN x and CUDA error: again",
        b"last NCCL",
    ]
    with_anchors = scanner.lines_with_anchors(TEXT)
    assert [sorted(names) for _, _, names in with_anchors] == [["CUDA error:"], ["CUDA error:", "NCCL"], ["NCCL"]]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_window_and_the_newest_first_order(engine: str) -> None:
    scanner = ChunkScanner(["NCCL"], engine=engine)
    start = TEXT.index(b"plain")
    assert [TEXT[a:b] for a, b in scanner.lines(TEXT, start)] == [b"NCCL WARN x and CUDA error: again", b"last NCCL"]
    assert [TEXT[a:b] for a, b in scanner.last_lines(TEXT)] == [b"last NCCL", b"NCCL WARN x and CUDA error: again"]


@pytest.mark.parametrize("engine", ENGINES)
def test_an_anchor_containing_another_is_still_reported(engine: str) -> None:
    """Only the shorter anchor is searched for; the longer one is looked for in the lines found."""
    scanner = ChunkScanner(["NCCL WARN Cuda failure ", "NCCL WARN", "Cuda failure"], engine=engine)
    text = b"NCCL WARN Cuda failure 2\nNCCL WARN other\nCuda failure alone\nNCCL WARN Cuda failure 9\n"
    found = scanner.lines_with_anchors(text, 0, len(text) - 6)  # the window ends inside "failure"
    assert [(text[a:b], sorted(names)) for a, b, names in found] == [
        (b"NCCL WARN Cuda failure 2", ["Cuda failure", "NCCL WARN", "NCCL WARN Cuda failure "]),
        (b"NCCL WARN other", ["NCCL WARN"]),
        (b"Cuda failure alone", ["Cuda failure"]),
        (b"NCCL WARN Cuda fail", ["NCCL WARN"]),
    ]


def test_no_anchors_and_empty_input_find_nothing() -> None:
    assert ChunkScanner([]).lines(TEXT) == []
    assert ChunkScanner(["x"]).lines(b"") == []
