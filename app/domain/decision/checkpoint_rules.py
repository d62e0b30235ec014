"""Does the newest recorded checkpoint look loadable? Pure rules over a bounded snapshot of its directory.

The I/O side (app/jobfiles/checkpoint_probe.py) walks the recorded path read-only, without following
symlinks out of the configured roots, and hands over a `Tree`: every entry by path relative to the
recorded path's parent, with its kind, size and mtime, and the text of the few small marker files the
layouts name. The rules here say, per framework, what a complete checkpoint has on disk:

* Megatron-LM / NeMo 1 (`--save DIR`): `DIR/latest_checkpointed_iteration.txt` holds the iteration (or
  `release`); `DIR/iter_0000500/` (7 digits) holds `mp_rank_XX[_YYY]/model_optim_rng.pt` files, or a
  torch distributed checkpoint (`.metadata` + `*.distcp`).
* DeepSpeed (`save_checkpoint(DIR)`): `DIR/latest` holds the tag; `DIR/<tag>/` holds
  `mp_rank_00_model_states.pt` or `zero_pp_rank_*_model_states.pt` (plus `*_optim_states.pt`).
* HF Trainer (`OUT/checkpoint-500/`): `trainer_state.json` (JSON with `global_step`) next to the weights.
* torch distributed checkpoint (torchtitan `step-100/`, NeMo 2): `.metadata` and `__R_0.distcp` shards.
* Lightning (`epoch=3-step=1200.ckpt`): a non-empty file (or a directory of shards for sharded strategies).
* plain PyTorch (`model_step_1200.pt`): a non-empty file.

A recorded checkpoint whose log line gives no path (DeepSpeed's "is ready now!", torchtitan's
"Finished saving") cannot be looked at: UNCHECKED, which does not count against the run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

FILE = "file"
DIR = "dir"
OUTSIDE = "outside"  # a symlink that leads out of the configured roots: seen, never followed


class CheckStatus(StrEnum):
    """The verdict on one recorded checkpoint."""

    OK = "OK"  # complete for its framework and newer than the previous attempt's
    MISSING = "MISSING"  # nothing where the log said
    INCOMPLETE = "INCOMPLETE"  # something there, but not what its framework writes when a save finishes
    NOT_NEWER = "NOT_NEWER"  # complete, but not newer than the previous attempt's checkpoint
    UNCHECKED = "UNCHECKED"  # no path in the log, outside the roots, unknown layout or out of time


# These count as "no new checkpoint" for the early-stop rule.
NO_LOADABLE = frozenset({CheckStatus.MISSING, CheckStatus.INCOMPLETE, CheckStatus.NOT_NEWER})

MARKER_FILES = frozenset({"latest_checkpointed_iteration.txt", "latest", "trainer_state.json"})
_MEGATRON_ITER = re.compile(r"^iter_(\d{7})$")
_HF_DIR = re.compile(r"^checkpoint-(\d+)$")
_WEIGHTS = re.compile(r"\.(pt|pth|bin|safetensors|distcp|ckpt|npy|h5|msgpack)$|\.index\.json$")


@dataclass(frozen=True)
class Entry:
    """One file system entry of the snapshot (symlinks inside the roots appear as what they point to)."""

    kind: str  # FILE | DIR | OUTSIDE
    size: int = 0
    mtime: float = 0.0
    text: str | None = None  # the first bytes of a marker file


@dataclass(frozen=True)
class Tree:
    """A bounded read-only snapshot: the recorded path and what lies under it (and its parent's markers)."""

    root: str  # the recorded path, relative keys below are under it ("" is the path itself)
    entries: Mapping[str, Entry] = field(default_factory=dict)
    parent: Mapping[str, Entry] = field(default_factory=dict)  # direct children of the recorded path's parent
    truncated: bool = False  # the walk hit its entry or time budget

    def get(self, rel: str) -> Entry | None:
        return self.entries.get(rel)

    def children(self, rel: str) -> dict[str, Entry]:
        """Direct children of a directory in the snapshot, by name."""
        prefix = f"{rel}/" if rel else ""
        out: dict[str, Entry] = {}
        for key, entry in self.entries.items():
            if key and key.startswith(prefix) and "/" not in key[len(prefix) :]:
                out[key[len(prefix) :]] = entry
        return out

    def files_under(self, rel: str) -> list[tuple[str, Entry]]:
        """Every file at or below ``rel``."""
        prefix = f"{rel}/" if rel else ""
        return [
            (key, entry)
            for key, entry in self.entries.items()
            if entry.kind == FILE and (key == rel or not rel or key.startswith(prefix))
        ]


@dataclass(frozen=True)
class CheckResult:
    """What the check found, in the shape stored on the Advice (`as_dict`)."""

    status: CheckStatus
    message: str
    path: str | None = None
    framework: str | None = None
    layout: str | None = None
    iteration: int | None = None
    newest_mtime: float | None = None

    @property
    def loadable(self) -> bool:
        return self.status not in NO_LOADABLE

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "message": self.message,
            "path": self.path,
            "framework": self.framework,
            "layout": self.layout,
            "iteration": self.iteration,
            "newest_mtime": self.newest_mtime,
            "loadable": self.loadable,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> CheckResult | None:
        if not data or "status" not in data:
            return None
        try:
            status = CheckStatus(str(data["status"]))
        except ValueError:
            return None
        return cls(
            status=status,
            message=str(data.get("message") or ""),
            path=data.get("path"),
            framework=data.get("framework"),
            layout=data.get("layout"),
            iteration=data.get("iteration") if isinstance(data.get("iteration"), int) else None,
            newest_mtime=data.get("newest_mtime") if isinstance(data.get("newest_mtime"), int | float) else None,
        )


@dataclass(frozen=True)
class _Found:
    layout: str
    problem: str | None  # None: complete
    iteration: int | None = None
    newest_mtime: float | None = None


def unchecked(reason: str, *, path: str | None = None, framework: str | None = None) -> CheckResult:
    """A checkpoint that could not be looked at; it does not count against the run."""
    return CheckResult(CheckStatus.UNCHECKED, reason, path=path, framework=framework)


def assess(
    tree: Tree,
    *,
    framework: str | None,
    recorded_iteration: int | None = None,
    previous: CheckResult | None = None,
) -> CheckResult:
    """The verdict for the checkpoint recorded at ``tree.root``, against the previous attempt's result."""
    path = tree.root
    top = tree.get("")
    if top is None:
        return CheckResult(
            CheckStatus.MISSING,
            f"no loadable checkpoint: {path} does not exist (the log recorded a save there)",
            path=path,
            framework=framework,
        )
    if top.kind == OUTSIDE:
        return unchecked(f"{path} is a symlink out of the configured roots; not followed", path=path)
    found = _find(tree, framework or "")
    if found is None:
        if tree.truncated:
            return unchecked(f"{path}: the look ran out of its budget before finding a layout", path=path)
        return unchecked(f"{path}: no known checkpoint layout ({framework or 'framework unknown'})", path=path)

    def verdict(status: CheckStatus, message: str, iteration: int | None) -> CheckResult:
        return CheckResult(
            status,
            message,
            path=path,
            framework=framework,
            layout=found.layout,
            iteration=iteration,
            newest_mtime=found.newest_mtime,
        )

    if found.problem is not None:
        return verdict(
            CheckStatus.INCOMPLETE,
            f"no loadable checkpoint: {path} is incomplete for {found.layout}: {found.problem}",
            found.iteration,
        )
    iteration = found.iteration if found.iteration is not None else recorded_iteration
    if recorded_iteration is not None and found.iteration is not None and found.iteration < recorded_iteration:
        return verdict(
            CheckStatus.INCOMPLETE,
            f"no loadable checkpoint: {path} ({found.layout}) holds iteration {found.iteration}, "
            f"older than the saved iteration {recorded_iteration} the log recorded",
            found.iteration,
        )
    older = _not_newer(iteration, found.newest_mtime, previous)
    if older is not None:
        return verdict(CheckStatus.NOT_NEWER, f"no new checkpoint: {path} ({found.layout}) {older}", iteration)
    at = f" at iteration {iteration}" if iteration is not None else ""
    return verdict(CheckStatus.OK, f"checkpoint {path} looks complete ({found.layout}){at}", iteration)


def _not_newer(iteration: int | None, mtime: float | None, previous: CheckResult | None) -> str | None:
    if previous is None or previous.status not in {CheckStatus.OK, CheckStatus.NOT_NEWER}:
        return None
    if iteration is not None and previous.iteration is not None:
        if iteration <= previous.iteration:
            return f"is at iteration {iteration}, not past the previous attempt's {previous.iteration}"
        return None
    if mtime is not None and previous.newest_mtime is not None and mtime <= previous.newest_mtime:
        return "was last written no later than the previous attempt's checkpoint"
    return None


def _newest(files: list[tuple[str, Entry]]) -> float | None:
    return max((e.mtime for _, e in files), default=None)


def _non_empty(files: list[tuple[str, Entry]], pattern: re.Pattern[str] | None = None) -> list[tuple[str, Entry]]:
    return [(k, e) for k, e in files if e.size > 0 and (pattern is None or pattern.search(k.rsplit("/", 1)[-1]))]


def _find(tree: Tree, framework: str) -> _Found | None:
    """The layout that applies (the framework's first, then whatever the tree itself shows) and its verdict."""
    top = tree.get("")
    assert top is not None
    name = tree.root.rstrip("/").rsplit("/", 1)[-1]
    if top.kind == FILE:
        if name in MARKER_FILES:
            return None
        if framework == "deepspeed" and name.endswith("model_states.pt"):
            return _deepspeed_from_file(tree)
        layout = "Lightning .ckpt" if name.endswith(".ckpt") else "a single checkpoint file"
        if top.size <= 0:
            return _Found(layout, "the file is empty", newest_mtime=top.mtime)
        return _Found(layout, None, newest_mtime=top.mtime)
    children = tree.children("")
    if "latest_checkpointed_iteration.txt" in children or (
        framework in {"megatron", "nemo"} and _MEGATRON_ITER.match(name)
    ):
        return _megatron(tree, children, name)
    if "latest" in children or (framework == "deepspeed" and "latest" in tree.parent):
        return _deepspeed_dir(tree, children, name)
    if "trainer_state.json" in children or (framework == "hf_trainer" and _HF_DIR.match(name)):
        return _hf(tree, children)
    if ".metadata" in children or framework in {"torchtitan", "dcp"}:
        return _dcp(tree, "", "torch distributed checkpoint")
    if name.endswith(".ckpt"):
        files = _non_empty(tree.files_under(""))
        if not files:
            return _Found("Lightning .ckpt (sharded)", "the directory holds no non-empty file")
        return _Found("Lightning .ckpt (sharded)", None, newest_mtime=_newest(files))
    return None


def _megatron(tree: Tree, children: Mapping[str, Entry], name: str) -> _Found:
    layout = "Megatron-LM"
    match = _MEGATRON_ITER.match(name)
    if match:  # the log named iter_XXXXXXX itself: the tracker is in the parent
        tracker_entry = tree.parent.get("latest_checkpointed_iteration.txt")
        base, wanted = "", int(match.group(1))
    else:
        tracker_entry = children.get("latest_checkpointed_iteration.txt")
        base, wanted = None, None
    if tracker_entry is None or tracker_entry.kind != FILE:
        return _Found(layout, "latest_checkpointed_iteration.txt is missing", iteration=wanted)
    text = (tracker_entry.text or "").strip()
    if text == "release":
        iteration, sub = None, "release"
    elif text.isdigit():
        iteration, sub = int(text), f"iter_{int(text):07d}"
    else:
        return _Found(layout, f"latest_checkpointed_iteration.txt holds {text[:40]!r}, not an iteration")
    if base is None:
        base = sub
        if tree.get(sub) is None:
            return _Found(layout, f"the tracker names {sub}/, which does not exist", iteration=iteration)
    elif wanted is not None and iteration is not None and iteration < wanted:
        return _Found(layout, f"the tracker still names iteration {iteration}", iteration=iteration)
    files = tree.files_under(base)
    shards = _non_empty(files, re.compile(r"^model_optim_rng\.pt$|^model_rng\.pt$|\.pt$"))
    shards = [(k, e) for k, e in shards if "/mp_rank_" in f"/{k}"]
    if shards:
        return _Found(layout, None, iteration=iteration, newest_mtime=_newest(shards))
    dcp = _dcp(tree, base, layout + " (distributed)")
    return _Found(
        dcp.layout, dcp.problem and f"{base}/: {dcp.problem}", iteration=iteration, newest_mtime=dcp.newest_mtime
    )


def _deepspeed_from_file(tree: Tree) -> _Found:
    top = tree.get("")
    assert top is not None
    layout = "DeepSpeed"
    if top.size <= 0:
        return _Found(layout, "the model states file is empty", newest_mtime=top.mtime)
    return _Found(layout, None, newest_mtime=top.mtime)


def _deepspeed_dir(tree: Tree, children: Mapping[str, Entry], name: str) -> _Found:
    layout = "DeepSpeed"
    if "latest" in children:  # the save dir itself
        latest = children["latest"]
        tag = (latest.text or "").strip()
        if not tag:
            return _Found(layout, "`latest` is empty")
        base = tag
        if tree.get(base) is None:
            return _Found(layout, f"`latest` names {tag}/, which does not exist")
    else:  # the tag dir; `latest` in the parent must name it
        tag = (tree.parent["latest"].text or "").strip()
        if tag != name:
            return _Found(layout, f"`latest` in the parent names {tag or 'nothing'}, not {name}")
        base = ""
    states = _non_empty(tree.files_under(base), re.compile(r"model_states\.pt$"))
    if not states:
        return _Found(layout, f"{base or name}/ holds no non-empty *model_states.pt")
    match = re.search(r"(\d+)$", tag)
    return _Found(layout, None, iteration=int(match.group(1)) if match else None, newest_mtime=_newest(states))


def _hf(tree: Tree, children: Mapping[str, Entry]) -> _Found:
    layout = "HF Trainer"
    state = children.get("trainer_state.json")
    if state is None or state.kind != FILE:
        return _Found(layout, "trainer_state.json is missing")
    try:
        data = json.loads(state.text or "")
    except ValueError:
        return _Found(layout, "trainer_state.json is not complete JSON")
    step = data.get("global_step") if isinstance(data, dict) else None
    if not isinstance(step, int):
        return _Found(layout, "trainer_state.json has no global_step")
    weights = [(k, e) for k, e in _non_empty(tree.files_under(""), _WEIGHTS) if not k.endswith("trainer_state.json")]
    if not weights:
        return _Found(layout, "no non-empty weights file next to trainer_state.json", iteration=step)
    return _Found(layout, None, iteration=step, newest_mtime=_newest(weights + [("trainer_state.json", state)]))


def _dcp(tree: Tree, base: str, layout: str) -> _Found:
    files = tree.files_under(base)
    meta = tree.get(f"{base}/.metadata" if base else ".metadata")
    if meta is None or meta.kind != FILE:
        return _Found(layout, ".metadata is missing (the save did not finish)")
    if meta.size <= 0:
        return _Found(layout, ".metadata is empty")
    shards = _non_empty(files, re.compile(r"\.distcp$"))
    if not shards:
        return _Found(layout, "no non-empty .distcp shard")
    return _Found(layout, None, newest_mtime=_newest(shards + [(".metadata", meta)]))


def partition_selected(partition: str | None, selection: tuple[str, ...]) -> bool:
    """True when an operator's partition list (`*` for all) covers the job's partition (or one of a list)."""
    if "*" in selection:
        return True
    return bool(partition) and any(p.strip() in selection for p in (partition or "").split(","))


def release_block_reason(
    check: Mapping[str, Any] | None, *, partition: str | None, block_partitions: tuple[str, ...]
) -> str | None:
    """Why the release waits (the operator chose to block on a failed check in this partition), else None."""
    result = CheckResult.from_dict(check)
    if result is None or result.loadable or not partition_selected(partition, block_partitions):
        return None
    return (
        f"release held back: {result.message} (RECOVERY_CHECKPOINT_CHECK_BLOCK_PARTITIONS covers "
        f"{partition}); an operator may release the job"
    )
