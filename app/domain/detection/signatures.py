"""Classify one log line: crash signature, checkpoint event, progress marker or throughput figures.

Pure code: rules in, results out. The chunk prefilter (app/domain/detection/chunkscan.py) decides which
lines are worth classifying; this module decides precisely what a line means.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

RULE_KINDS: tuple[str, ...] = ("crash", "checkpoint", "progress", "throughput", "benign")

# Crash categories of SPEC §5 (operators may add their own upper-case names).
SEGFAULT = "SEGFAULT"
CUDA_ERROR = "CUDA_ERROR"
CUDA_OOM = "CUDA_OOM"
HOST_OOM = "HOST_OOM"
NCCL_ERROR = "NCCL_ERROR"
NCCL_TIMEOUT = "NCCL_TIMEOUT"
XID = "XID"
NODE_FAIL = "NODE_FAIL"
TIME_LIMIT = "TIME_LIMIT"
NAN_LOSS = "NAN_LOSS"
PYTHON_TRACEBACK = "PYTHON_TRACEBACK"
CHECKPOINT_WRITE_FAILURE = "CHECKPOINT_WRITE_FAILURE"
FILESYSTEM = "FILESYSTEM"
CRASH_CATEGORIES: tuple[str, ...] = (
    SEGFAULT,
    CUDA_ERROR,
    CUDA_OOM,
    HOST_OOM,
    NCCL_ERROR,
    NCCL_TIMEOUT,
    XID,
    NODE_FAIL,
    TIME_LIMIT,
    NAN_LOSS,
    PYTHON_TRACEBACK,
    CHECKPOINT_WRITE_FAILURE,
    FILESYSTEM,
)

PRETRAINING = "pretraining"
TRAININGLOOP = "trainingloop"
PHASES: tuple[str, ...] = (PRETRAINING, TRAININGLOOP)
CHECKPOINT_KINDS: tuple[str, ...] = ("saved", "loaded")

TRACEBACK_START = "Traceback (most recent call last):"


@dataclass(frozen=True)
class Rule:
    """One named signature: literal anchors for the prefilter plus a precise regex.

    `label` means: crash -> category; checkpoint -> kind (saved/loaded); progress -> phase;
    throughput -> metric name (the regex's `value` group, times `scale`); benign -> unused.
    """

    name: str
    kind: str
    anchors: tuple[str, ...]
    pattern: str
    label: str = ""
    framework: str = ""
    exclude: str = ""
    scale: float = 1.0
    example: str = ""
    source: str = "default"

    def compiled(self) -> re.Pattern[str]:
        return _compile(self.pattern)

    def compiled_exclude(self) -> re.Pattern[str] | None:
        return _compile(self.exclude) if self.exclude else None


_CACHE: dict[str, re.Pattern[str]] = {}


def _compile(pattern: str) -> re.Pattern[str]:
    compiled = _CACHE.get(pattern)
    if compiled is None:
        compiled = _CACHE[pattern] = re.compile(pattern)
    return compiled


@dataclass(frozen=True)
class RuleSet:
    """The effective, ordered rules (earlier rules win within a kind)."""

    rules: tuple[Rule, ...]

    def of_kind(self, kind: str) -> tuple[Rule, ...]:
        return tuple(rule for rule in self.rules if rule.kind == kind)

    def anchors_of(self, *kinds: str) -> tuple[str, ...]:
        """Distinct anchors of the given kinds, in rule order."""
        seen: dict[str, None] = {}
        for rule in self.rules:
            if rule.kind in kinds:
                for anchor in rule.anchors:
                    seen.setdefault(anchor, None)
        return tuple(seen)

    def by_name(self, name: str) -> Rule | None:
        return next((rule for rule in self.rules if rule.name == name), None)


@dataclass(frozen=True)
class CrashSignature:
    """A line that says the run died or is dying."""

    category: str
    rule: str
    nodes: tuple[str, ...] = ()
    rank: int | None = None
    xid: int | None = None
    detail: str = ""
    first_observed: bool = False  # a line of torchrun's "Root Cause (first observed failure)" block


@dataclass(frozen=True)
class CheckpointEvent:
    """A checkpoint saved/loaded line: evidence of an event, not proof the checkpoint loads."""

    kind: str
    framework: str
    rule: str
    iteration: int | None = None
    path: str | None = None


@dataclass(frozen=True)
class ProgressMarker:
    """A progress marker: a configured rule's match, or a step counter read by structure.

    `arms` is False for a counter seen without an advance yet (offline tools list it; the collector
    never gets one): the hang detector arms on a configured marker or on a counter that advanced.
    """

    phase: str
    rule: str
    framework: str = ""
    iteration: int | None = None
    arms: bool = True


@dataclass(frozen=True)
class ThroughputSample:
    """Throughput figures found on one line, by metric name."""

    values: dict[str, float] = field(default_factory=dict)
    rules: tuple[str, ...] = ()


Signal = CrashSignature | CheckpointEvent | ProgressMarker | ThroughputSample

_RANK = re.compile(r"(?:\[\s*[Rr]ank\s*[:=]?\s*(\d+)\s*\]|\b[Rr]ank\s*[:=]?\s*(\d+)\b)")
# NCCL's `host:pid:tid [dev]` prefix; a container's host name may start with a digit ("50428e4af543"),
# never be all digits.
_NCCL_HOST = re.compile(
    r"(?:^|[\s\]:])(?P<node>[A-Za-z][\w.-]*|\d[\w.-]*?[A-Za-z][\w.-]*|\.\.\.[\w.-]+):\d+:\d+ \[\d+\]"
)
_HOST_PORT = re.compile(r"\b(?P<node>[A-Za-z][\w-]*\d[\w-]*):\d+\b")
_BRACKET_HOST = re.compile(r"\[(?!rank\d|Rank\s?\d)(?P<node>[A-Za-z][A-Za-z-]*\d[\w-]*)\]")
_KERNEL_HOST = re.compile(r"(?:^|\s)(?P<node>[A-Za-z][\w.-]*)\s+kernel:")
_ITERATION_IN_PATH = re.compile(
    r"(?:iter_|global_step|checkpoint[-_]?|ckpt[-_]|model[-_]|step[=_-]?|iteration[=_-]?)(\d+)"
    r"(?!.*(?:iter_|global_step|checkpoint[-_]?|ckpt[-_]|model[-_]|step[=_-]?)\d)"
)
# "at iteration 15", "for step 10", "global_step=10", "step: 7" in a checkpoint line without an iteration group.
# fairseq counts optimizer updates: "(epoch 70 @ 2162 updates"; TensorFlow "Saving checkpoints for 2000 into ...".
_ITERATION_IN_LINE = re.compile(
    r"(?<![\w/.-])(?i:iteration|iter|global[_ ]step|step)s?\s*[:=#]?\s*(\d+)\b(?!\.\d)|\b(\d+) updates\b"
    r"|(?i:checkpoints?) for (\d+)\b(?!\.\d)"
)
# The last resort of a checkpoint line that names no step: its epoch ("=> loaded checkpoint 'x.pth' (epoch 1)").
_EPOCH_IN_LINE = re.compile(r"(?<![\w/.-])(?i:epoch)\s*[:=#]?\s*(\d+)\b(?!\.\d)")
# A path in a checkpoint line without a path group: a token with a slash, or a checkpoint file name.
_PATH_IN_LINE = re.compile(
    r"(?<![\w])(?P<path>(?:[~.]{0,2}/|[A-Za-z]:\\)?[\w.~=+-]+(?:[/\\][\w.~=+-]+)+/?|[\w.=+-]+\.(?:pt|pth|ckpt|bin|safetensors|distcp|pkl|h5|npz))"
)
# The number a checkpoint path's last component ends with, after a separator: ".../checkpoints/001000",
# "resnet18_v2-0102.params" (never "gpt3", "llama-7b", a shard "model-00001-of-00002.bin", nor an epoch "epoch_76.pth":
# an epoch is no step, and the next line may name the step, line_facts.py).
_TRAILING_NUMBER = re.compile(
    r"(?:^|[/\\_.=-])(?<!-of-)(?<![Ee]poch[_=-])(?<![Ee]poch)0*(\d{1,12})(?:\.[A-Za-z]\w{0,11})*$"
)
# A path that names a checkpoint: preferred over other paths of the line (a date "12/20", a config file).
_CHECKPOINT_PATH_WORD = re.compile(
    r"(?i:ckpt|checkpoint|iter_|global_step|step|epoch|model|weights|snapshot|\.(?:pt|pth|bin|safetensors|params|h5|npz|pkl|distcp)$)"
)


def _checkpoint_path(line: str) -> str | None:
    """The path a checkpoint line names: the first path that looks like a checkpoint, else the last path that
    has a letter (never a date or a fraction such as "12/20")."""
    last: str | None = None
    for found in _PATH_IN_LINE.finditer(line):
        candidate = found.group("path")
        if not any(char.isalpha() for char in candidate):
            continue
        if _CHECKPOINT_PATH_WORD.search(candidate):
            return candidate
        last = candidate
    return last


_RANK_PREFIX = re.compile(r"^\s*(?:\[?[Rr]ank\s?\d+\]?:\s?|\d+:\s)")


def _rank_of(line: str) -> int | None:
    match = _RANK.search(line)
    if not match:
        return None
    return int(match.group(1) or match.group(2))


def _int_or_none(value: str | None) -> int | None:
    if value is None:
        return None
    digits = value.replace(",", "").strip()
    return int(digits) if digits.isdigit() else None


def _group(match: re.Match[str], name: str) -> str | None:
    """A named group, or its numbered twins (`node2`, ...) that alternations need in Python regex."""
    groups = match.groupdict()
    for key in (name, name + "2", name + "3"):
        if groups.get(key):
            return groups[key]
    return None


def _nodes_of(line: str, match: re.Match[str], category: str) -> tuple[str, ...]:
    """Nodes the line implicates: the regex's `node` group, else category-specific places."""
    explicit = _group(match, "node")
    if explicit:
        return (explicit,)
    if category == XID:
        host = _KERNEL_HOST.search(line[: match.start() + 1] if match.start() else line)
        return (host.group("node"),) if host else ()
    if category in (NCCL_ERROR, NCCL_TIMEOUT):
        found: dict[str, None] = {}
        for regex in (_NCCL_HOST, _BRACKET_HOST, _HOST_PORT):
            for m in regex.finditer(line):
                found.setdefault(m.group("node"), None)
            if found:
                break
        return tuple(found)
    return ()


class Classifier:
    """Precise classification of single lines against one RuleSet."""

    def __init__(self, ruleset: RuleSet):
        self.ruleset = ruleset
        self._by_kind = {
            kind: [(rule, rule.compiled(), rule.compiled_exclude()) for rule in ruleset.of_kind(kind)]
            for kind in RULE_KINDS
        }
        self._narrowed: dict[frozenset[str], tuple[list[Any], list[Any]]] = {}
        self._benign = [(rule.anchors, regex) for rule, regex, _ in self._by_kind["benign"]]
        # A benign rule of plain literals (python_warning) is decided by `in` alone, before any crash
        # regex runs: a line holding one of its literals (each holding one of the rule's anchors) is benign.
        self._benign_literals = tuple(
            literal
            for rule in ruleset.of_kind("benign")
            for literal in literal_alternatives(rule.pattern) or ()
            if any(anchor in literal for anchor in rule.anchors)
        )

    def _narrow(self, anchors: frozenset[str]) -> tuple[list[Any], list[Any]]:
        """The crash and checkpoint rules worth trying, given the anchors the prefilter saw (cached per anchor set)."""
        rules = self._narrowed.get(anchors)
        if rules is None:
            if len(self._narrowed) > 4096:
                self._narrowed.clear()
            crash, checkpoint = (
                [entry for entry in self._by_kind[kind] if not anchors.isdisjoint(entry[0].anchors)]
                for kind in ("crash", "checkpoint")
            )
            rules = self._narrowed[anchors] = (crash, checkpoint)
        return rules

    def is_benign(self, line: str) -> bool:
        """True when a global benign rule matches (applies to crash classification only)."""
        for anchors, regex in self._benign:
            for anchor in anchors:  # a plain loop: any() with a generator costs more than the test
                if anchor in line:
                    if regex.search(line):
                        return True
                    break
        return False

    def candidate(self, line: str, anchors: frozenset[str]) -> CrashSignature | CheckpointEvent | None:
        """What a prefilter candidate means: its crash signature, else its checkpoint event, else nothing.

        The same as `crash(line, anchors) or checkpoint(line, anchors)` with one rule lookup and no
        checkpoint pass for the many benign candidates that no checkpoint rule is keyed on.
        """
        crash, checkpoint = self._narrow(anchors)
        found = self._crash(line, crash, False) if crash else None
        if found is None and checkpoint:
            return self._checkpoint(line, checkpoint, False)
        return found

    def crash(self, line: str, anchors: frozenset[str] | None = None) -> CrashSignature | None:
        """The first crash rule the line matches, unless a benign rule or the rule's exclude matches.

        `anchors` (from the prefilter) are the anchors known to occur in the line; when given,
        only rules keyed on them are tried.
        """
        rules = self._by_kind["crash"] if anchors is None else self._narrow(anchors)[0]
        return self._crash(line, rules, anchors is None)

    def _crash(self, line: str, rules: list[Any], unanchored: bool) -> CrashSignature | None:
        for literal in self._benign_literals:
            if literal in line:
                return None  # benign, so no crash whichever rule would match (is_benign would say True)
        for rule, regex, exclude in rules:
            if unanchored and not _anchored(rule, line):
                continue
            match = regex.search(line)
            if match is None:
                continue
            # A benign line is never a crash, whichever rule matches, so asking first gives the same
            # answer and skips the exclude on the common benign candidates (NCCL "error handling").
            if self.is_benign(line):
                return None
            if exclude is not None and exclude.search(line):
                continue
            rank = _int_or_none(_group(match, "rank"))
            return CrashSignature(
                category=rule.label,
                rule=rule.name,
                nodes=_nodes_of(line, match, rule.label),
                rank=rank if rank is not None else _rank_of(line),
                xid=_int_or_none(_group(match, "xid")),
                detail=line.strip()[:500],
            )
        return None

    def checkpoint(self, line: str, anchors: frozenset[str] | None = None) -> CheckpointEvent | None:
        """The first checkpoint rule the line matches (`anchors` as for `crash`)."""
        rules = self._by_kind["checkpoint"] if anchors is None else self._narrow(anchors)[1]
        return self._checkpoint(line, rules, anchors is None)

    def _checkpoint(self, line: str, rules: list[Any], unanchored: bool) -> CheckpointEvent | None:
        for rule, regex, exclude in rules:
            if unanchored and not _anchored(rule, line):
                continue
            match = regex.search(line)
            if match is None or (exclude is not None and exclude.search(line)):
                continue
            path = _group(match, "path")
            if not path and not _group(match, "tag"):
                path = _checkpoint_path(line)
            if path:
                path = path.strip().strip("'\"").rstrip(".,;:)")
            iteration = _int_or_none(_group(match, "iteration"))
            if iteration is None:
                # The step from the line itself, else from the path (iter_0000010, global_step10, checkpoint-10).
                said = _ITERATION_IN_LINE.search(line)
                if said is not None and (
                    not path or said.start() < line.find(path) or said.start() >= line.find(path) + len(path)
                ):
                    iteration = int(next(group for group in said.groups() if group is not None))
                else:
                    hint = path or _group(match, "tag") or line
                    found = _ITERATION_IN_PATH.search(hint) or _EPOCH_IN_LINE.search(line)
                    if found is None and path:
                        found = _TRAILING_NUMBER.search(path.rstrip("/\\"))  # ".../001000", "resnet18-0102.params"
                    iteration = int(found.group(1)) if found else None
            return CheckpointEvent(
                kind=rule.label, framework=rule.framework, rule=rule.name, iteration=iteration, path=path or None
            )
        return None

    def progress(self, line: str) -> ProgressMarker | None:
        for rule, regex, exclude in self._by_kind["progress"]:
            if not _anchored(rule, line):
                continue
            match = regex.search(line)
            if match is None or (exclude is not None and exclude.search(line)):
                continue
            return ProgressMarker(
                phase=rule.label,
                rule=rule.name,
                framework=rule.framework,
                iteration=_int_or_none(_group(match, "iteration")),
            )
        return None

    def throughput(self, line: str) -> ThroughputSample | None:
        values: dict[str, float] = {}
        names: list[str] = []
        for rule, regex, exclude in self._by_kind["throughput"]:
            if rule.label in values or not _anchored(rule, line):
                continue
            match = regex.search(line)
            if match is None or (exclude is not None and exclude.search(line)):
                continue
            try:
                values[rule.label] = float(match.group("value").replace(",", "")) * rule.scale
            except (ValueError, IndexError):
                continue
            names.append(rule.name)
        return ThroughputSample(values=values, rules=tuple(names)) if values else None

    def classify(self, line: str) -> Signal | None:
        """Crash first, then checkpoint, progress, throughput: the one thing this line means most."""
        return self.crash(line) or self.checkpoint(line) or self.progress(line) or self.throughput(line)

    def traceback_category(self, exception_line: str) -> CrashSignature:
        """Decide a fatal traceback's category from its final exception line."""
        inner = self.crash(exception_line)
        if inner is not None and inner.category != PYTHON_TRACEBACK:
            return CrashSignature(
                category=inner.category,
                rule="python_traceback:" + inner.rule,
                nodes=inner.nodes,
                rank=inner.rank,
                xid=inner.xid,
                detail=exception_line.strip()[:500],
            )
        return CrashSignature(
            category=PYTHON_TRACEBACK,
            rule="python_traceback",
            rank=_rank_of(exception_line),
            detail=exception_line.strip()[:500],
        )


def literal_alternatives(pattern: str) -> tuple[str, ...] | None:
    """The texts a pattern of plain literal alternatives matches (`a|b\\.c` -> ("a", "b.c")); None for any other."""
    literals: list[str] = []
    current: list[str] = []
    escaped = False
    for char in pattern:
        if escaped:
            if char.isalnum():
                return None  # \b, \d, \1 ...
            current.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "|":
            literals.append("".join(current))
            current = []
        elif char in ".^$*+?{}[]()":
            return None
        else:
            current.append(char)
    if escaped:
        return None
    literals.append("".join(current))
    return tuple(literals)


def _anchored(rule: Rule, line: str) -> bool:
    """A line holds one of the rule's anchors (an anchor ending in a newline: at the end of the line)."""
    return any(anchor in line if anchor[-1:] != "\n" else line.endswith(anchor[:-1]) for anchor in rule.anchors)


def strip_rank_prefix(line: str) -> tuple[str, str]:
    """Split a torchrun/srun label ("[rank3]: ", "Rank0: ", "3: ") from the rest of the line."""
    match = _RANK_PREFIX.match(line)
    if not match:
        return "", line
    return match.group(0).strip(), line[match.end() :]


def exception_line_index(lines: Iterable[str], *, prefix: str, limit: int = 400) -> int | None:
    """Index of the final exception line of a traceback whose body is `lines` (after its start line).

    Lines from other ranks (a different label prefix) are skipped, so interleaved tracebacks of
    several ranks each find their own exception. Returns None when it has not been written yet.
    """
    for index, raw in enumerate(lines):
        if index >= limit:
            return None
        label, body = strip_rank_prefix(raw.rstrip("\r\n"))
        if label != prefix:
            continue
        if not body.strip() or body[:1] in (" ", "\t", "^", "~") or body.startswith((TRACEBACK_START, 'File "')):
            continue  # frames (also when a paste lost their indentation), carets, a nested traceback's start
        return index  # the first non-indented line ends the traceback: "XxxError: ...", or e.g. "Killed"
    return None
