"""Progress by structure: step counters in a line (tqdm bars, `step N`, `Epoch [a][b/c]`, `N/M` with metrics).

A line is progress when it carries a step counter; the hang detector arms when a counter is seen
ADVANCING (the same counter, a larger value), never on one line. `parse_step` reads the counter of
one line; `StepTracker` remembers the last value per counter and says when one advanced; the
per-log template miner (app/domain/detection/templates.py) finds counters in formats no parser knows.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass

# tqdm: "{n}/{total} [{elapsed}<{remaining}, ...]" (also "Steps:  0%|  | 1/500000 [00:03<428:00:00, ...]").
_TQDM = re.compile(r"(?<![\d/])(?P<n>\d+)/(?P<total>\d+) \[(?:\d+:)?\d+:\d+<")
# "Epoch: [0][415/1736]", mmengine "Epoch(train) [1][200/735]", "[epoch  3][iter    0/ 110]",
# "Epoch  1,     1/15756;", "{| Epoch: 54/167 (1922/1926) |", "Epoch: [1/100][1900/2976]".
_EPOCH_ITER = re.compile(
    r"(?i:epoch)(?:\(\w+\))?[\s:\[]{0,4}(?P<e>\d+)(?:\s*/\s*\d+)?[\s\]\[,;:(|]{1,12}(?i:(?:iter|batch|step)\s+)?"
    r"(?P<n>\d+)\s*/\s*(?P<total>\d+)(?![\d/])"
)
# A named counter: "iteration 12 | loss 2.3", "step: 10", "'step': 10", "global_step=10", "completed step: 7".
# Plural forms after "skipped"/"nan" (Megatron's "number of skipped iterations: 0") are counts, not counters;
# "steps = 1000" with spaces around "=" is a setting in a header, not a step; "step 3495064.0" is a Slurm step id.
_NAMED = re.compile(
    r"(?<![\w/.=-])(?<!skipped )(?<!nan )(?<!of )(?P<kw>global[_ ]step|train_step|iteration|iter|step)s?['\"‘’]?"
    r"(?:\s*:\s*|=|#|\s+)\[?\s*(?P<n>\d+)(?![\d.]*%|\d*\.\w)(?:\s*/\s*(?P<total>\d+))?",
    re.IGNORECASE,
)
_EPOCH = re.compile(r"(?<![\w/.=-])(?i:epoch)['\"‘’]?(?:\s*:\s*|=|\s+)(?P<n>\d+(?:\.\d+)?)(?![\d%])")
_FRACTION = re.compile(r"(?<![\w./:-])(?P<n>\d+)\s*/\s*(?P<total>\d+)(?![\w./:-])")
_METRIC = re.compile(r"(?i:loss|lr|acc\w*|ppl|perplexity|reward|grad_norm)['\"]?\s*[:=]?\s*[-+]?\d")
_DIGIT = re.compile(r"\d")


@dataclass(frozen=True)
class StepReading:
    """One counter read from one line: which counter (`key`), its value and its total if printed."""

    key: str
    value: float
    total: int | None = None
    source: str = "parser"  # parser | template

    @property
    def iteration(self) -> int | None:
        """The value as an iteration number (None for a fractional epoch)."""
        return int(self.value) if self.value == int(self.value) and self.key != "epoch" else None


def parse_step(line: str) -> StepReading | None:
    """The step counter a line carries, or None (for the newest state of a `\\r`-updated bar, pass its last part)."""
    if len(line) > 4096:
        line = line[-4096:]
    if "<" in line and "/" in line and "[" in line:  # a tqdm bar always prints "[elapsed<remaining"
        bars = _TQDM.findall(line)
        if bars:
            n, total_text = bars[-1]  # the last bar on the line is the newest state
            total = int(total_text)
            return StepReading(f"bar/{total}", float(n), total)
    lowered = line.lower()
    if "checkpoint" in lowered or "ckpt" in lowered:
        return None  # names the step it saved or loaded: a checkpoint event (signatures.py), not a step taken
    if "poch" in lowered:
        match = _EPOCH_ITER.search(line)
        if match is not None:
            total = int(match["total"])
            value = int(match["e"]) * (total + 1) + int(match["n"])
            return StepReading(f"epoch-iter/{total}", float(value), total)
    if "step" in lowered or "iter" in lowered:
        match = _NAMED.search(line)
        if match is not None:
            keyword = match["kw"].lower().replace(" ", "_")
            named_total = int(match["total"]) if match["total"] else None
            if named_total is None or int(match["n"]) <= named_total:
                key = keyword if named_total is None else f"{keyword}/{named_total}"
                return StepReading(key, float(match["n"]), named_total)
    if "/" in line and _METRIC.search(line):
        for match in _FRACTION.finditer(line):
            done, whole = int(match["n"]), int(match["total"])
            if 0 <= done <= whole and whole > 1:
                return StepReading(f"fraction/{whole}", float(done), whole)
    if "poch" in lowered:
        match = _EPOCH.search(line)
        if match is not None:
            return StepReading("epoch", float(match["n"]))
    return None


def parse_bar_line(text: str) -> StepReading | None:
    """The newest counter of a physical line whose bar rewrites itself with carriage returns."""
    if "\r" not in text:
        return parse_step(text)
    for part in reversed(text.split("\r")):
        if part and _DIGIT.search(part):
            reading = parse_step(part)
            if reading is not None:
                return reading
    return None


class StepTracker:
    """Per log: the last value of each counter; `advanced` says when one grew (a restart lowers it again)."""

    MAX_KEYS = 256

    def __init__(self) -> None:
        self._last: OrderedDict[str, float] = OrderedDict()

    def advanced(self, reading: StepReading) -> bool:
        """True when this counter was seen before with a smaller value; remembers the new value either way."""
        previous = self._last.get(reading.key)
        self._last[reading.key] = reading.value
        self._last.move_to_end(reading.key)
        if len(self._last) > self.MAX_KEYS:
            self._last.popitem(last=False)
        return previous is not None and reading.value > previous

    def seen(self, reading: StepReading) -> bool:
        """True when this counter was read before (without recording anything)."""
        return reading.key in self._last
