"""The real-world corpora (tests/fixtures/realworld/ and its held-out sets) agree with their labels and the code."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from app.domain.decision import rootcause
from app.domain.detection import signatures
from app.slurm.names import expand_hostlist

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CORPUS = FIXTURES / "realworld"
HOLDOUT = FIXTURES / "realworld-holdout"  # never tuned on before its figures were measured (see its README)
HOLDOUT2 = FIXTURES / "realworld-holdout2"  # issue 24: a seeded random third of the new sources (see its README)
HOLDOUT3 = FIXTURES / "realworld-holdout3"  # issue 24 item 10: a seeded half of later new sources (see its README)
HOLDOUT4 = FIXTURES / "realworld-holdout4"  # issue 24: a seeded third of the fourth batch's sources (see its README)
HOLDOUT5 = FIXTURES / "realworld-holdout5"  # issue 24: node-blame sources never used, labelled and scored before tuning
HELD_OUT = (HOLDOUT, HOLDOUT2, HOLDOUT3, HOLDOUT4, HOLDOUT5)
CORPORA = (CORPUS, *HELD_OUT)
# FILESYSTEM is required by issue 12 and added to the code's list by the detector work; accepted until then.
KNOWN_CATEGORIES = set(signatures.CRASH_CATEGORIES) | {"FILESYSTEM"}
OUTLOOKS = {"infrastructure", "transient", "application", "none"}
FRAMEWORKS = {
    "pytorch",
    "megatron",
    "nemo",
    "deepspeed",
    "transformers",
    "accelerate",
    "lightning",
    "nccl",
    "nvidia-driver",
    "slurm",
    "torchtitan",
    "other",
    # issue 24: frameworks of the grown corpus
    "jax",
    "maxtext",
    "ray",
    "verl",
    "trl",
    "mmengine",
    "mmdetection",
    "mmaction",
    "mmpretrain",
    "xtuner",
    "detectron2",
    "fairseq",
    "colossalai",
    "litgpt",
    "lit-llama",
    "nanochat",
    "paddle",
    "tensorflow",
    "horovod",
    "mxnet",
    "caffe",
    "sentence-transformers",
    "axolotl",
    "llama-factory",
    "unsloth",
    "torchtune",
    "composer",
    "nanotron",
    "levanter",
    "t5x",
    "openrlhf",
    "keras",
    "ultralytics",
    "nemo-rl",
    "nanogpt",
    # issue 24 item 10: frameworks of the third growth
    "tensorpack",
    "ms-swift",
}
KEYS = {
    "name",
    "source",
    "framework",
    "categories",
    "primary",
    "outlook",
    "xid",
    "nodes",
    "rank",
    "checkpoint_kind",
    "checkpoint_iteration",
    "progress",
    "progress_format",  # the progress line's format, named (counts the distinct formats of the corpus)
    "checkpoint_load",  # true: the excerpt has a checkpoint load line (bench: a "loaded" checkpoint is reported)
    "allocation",  # the job's nodes as a Slurm hostlist, when the source shows them
    "tasks_per_node",  # SLURM_TASKS_PER_NODE syntax, when the source states the layout
    "notes",
}


def _labels(corpus: Path) -> list[dict[str, Any]]:
    with open(corpus / "labels.toml", "rb") as handle:
        return [dict(row, corpus=corpus) for row in tomllib.load(handle)["file"]]


LABELS = _labels(CORPUS)
ROWS = LABELS + [row for corpus in HELD_OUT for row in _labels(corpus)]
IDS = [f"{row['corpus'].name}/{row['name']}" for row in ROWS]


@pytest.mark.parametrize("corpus", CORPORA, ids=[corpus.name for corpus in CORPORA])
def test_every_log_file_has_exactly_one_label_row_and_every_row_a_file(corpus: Path) -> None:
    names = [row["name"] for row in _labels(corpus)]
    assert len(names) == len(set(names)), sorted({n for n in names if names.count(n) > 1})
    files = {path.name for path in corpus.glob("*.log")}
    assert files - set(names) == set(), "log files without a label row"
    assert set(names) - files == set(), "label rows without a log file"


def test_the_corpus_is_big_enough_and_has_benign_look_alikes() -> None:
    assert len(LABELS) >= 150
    assert sum(1 for row in LABELS if not row["categories"]) >= 25


@pytest.mark.parametrize("corpus", HELD_OUT, ids=[corpus.name for corpus in HELD_OUT])
def test_the_held_out_excerpts_are_not_in_the_tuning_corpus(corpus: Path) -> None:
    tuning = {row["source"] for row in LABELS}
    assert [row["name"] for row in _labels(corpus) if row["source"] in tuning] == []


def test_the_held_out_sets_share_no_source() -> None:
    sources = [{row["source"] for row in _labels(corpus)} for corpus in HELD_OUT]
    for index, first in enumerate(sources):
        for second in sources[index + 1 :]:
            assert first & second == set()


def test_file_names_are_unique_across_the_corpora() -> None:
    names = [path.name for corpus in CORPORA for path in corpus.glob("*.log")]
    assert sorted({n for n in names if names.count(n) > 1}) == []


def test_the_grown_corpus_meets_issue_24s_size_goals() -> None:
    """Issue 24 item 10: >= 350 excerpts, >= 25 frameworks, >= 40 blamed-node files, >= 40 distinct progress formats
    and >= 30 checkpoint loads over the tuning corpus and its held-out sets, and a third held-out set of >= 40."""
    assert len(ROWS) >= 350
    assert len({row["framework"] for row in ROWS}) >= 25
    assert len({row["progress_format"] for row in ROWS if row.get("progress_format")}) >= 40
    assert sum(1 for row in ROWS if row.get("nodes")) >= 40
    assert sum(1 for row in ROWS if row.get("checkpoint_load")) >= 30
    assert len(_labels(HOLDOUT3)) >= 40


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_label_row_is_well_formed(row: dict[str, Any]) -> None:
    assert set(row) - {"corpus"} <= KEYS, set(row) - KEYS - {"corpus"}
    url = urlparse(row["source"])
    assert url.scheme in ("http", "https") and url.netloc, row["source"]
    assert row["framework"] in FRAMEWORKS
    assert isinstance(row["progress"], bool)
    assert row["outlook"] in OUTLOOKS
    categories = row["categories"]
    assert set(categories) <= KNOWN_CATEGORIES, set(categories) - KNOWN_CATEGORIES
    assert len(categories) == len(set(categories))
    if categories:
        assert row.get("primary") in categories
        assert row["outlook"] != "none"
    else:
        assert "primary" not in row, "a crash-free file names no root cause"
        assert row["outlook"] == "none"
        assert not row.get("nodes") and "xid" not in row, "nothing to blame in a crash-free file"
    if "xid" in row:
        assert isinstance(row["xid"], int) and row["xid"] > 0
        assert "XID" in categories
    for node in row.get("nodes", []):
        assert isinstance(node, str) and node
    if "checkpoint_iteration" in row:
        assert isinstance(row["checkpoint_iteration"], int) and row["checkpoint_iteration"] >= 0
        assert row.get("checkpoint_kind") in signatures.CHECKPOINT_KINDS
    if "rank" in row:
        assert isinstance(row["rank"], int) and row["rank"] >= 0
    if "progress_format" in row:
        assert isinstance(row["progress_format"], str) and row["progress_format"].strip()
        assert row["progress"] is True, "a progress format is named only where progress is labelled"
    if "checkpoint_load" in row:
        assert row["checkpoint_load"] is True, "omit the key instead of false"
    if "allocation" in row:
        assert expand_hostlist(row["allocation"]), "allocation is a Slurm hostlist: node[1-4]"
    if "tasks_per_node" in row:
        assert rootcause.parse_tasks_per_node(row["tasks_per_node"]) is not None, "SLURM_TASKS_PER_NODE: 4(x2)"


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_log_file_is_a_small_text_excerpt_that_contains_its_labelled_facts(row: dict[str, Any]) -> None:
    text = (row["corpus"] / row["name"]).read_text(encoding="utf-8")
    lines = text.splitlines()
    assert 1 <= len(lines) <= 80
    if row["name"].startswith("benign-"):
        assert row["categories"] == [], "benign look-alikes are crash-free"
    for node in row.get("nodes", []):
        assert node in text, f"blamed node {node} does not occur in the excerpt"
    if "checkpoint_iteration" in row:
        assert str(row["checkpoint_iteration"]) in text
    if "xid" in row:
        assert str(row["xid"]) in text
    if row.get("checkpoint_load"):
        words = ("load", "resum", "restor", "initializing from", "continuing training from")
        assert any(word in text.lower() for word in words), "no load line"
