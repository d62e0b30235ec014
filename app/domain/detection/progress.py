"""Progress by structure: step counters in a line (tqdm bars, `step N`, `Epoch [a][b/c]`, `N/M` with metrics).

A line is progress when it carries a step counter. `parse_step` reads the counter of one line together
with the line's metric fields (`loss: 2.3`, `loss=0.36`, `'loss': 0.3`, `loss 2.3 |`) and its rates
(`5.41it/s`, `samples/sec: 250`); a reading is STRONG when the counter has a total (`N/M`, a tqdm bar) or
the line prints a metric value: one such line arms the hang detector, a bare counter arms only on an
advance (docs/detectors.md). `StepTracker` remembers the last value per counter and says when one
advanced; the per-log template miner (app/domain/detection/templates.py) finds counters in formats no parser knows.
Throughput samples are taken from the same reading (`rates_of`), so progress and rate come from one parse.
"""

from __future__ import annotations

import re
import zlib
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
# "steps = 1000" (plural, spaces around "=") is a setting in a header, not a step; "step 3495064.0" is a Slurm step id.
_NAMED = re.compile(
    r"(?<![\w/.=-])(?<!skipped )(?<!nan )(?<!of )"
    r"(?P<kw>global[_ ]step|train_step|iteration|iter|step|batch)(?P<pl>s)?['\"‘’]?"
    r"(?P<sep>\s*:\s*|\s*=\s*|#|\s+)\[?\s*(?P<n>\d+)(?![\d.]*%|\d*\.\w)(?:\s*/\s*(?P<total>\d+))?",
    re.IGNORECASE,
)
_EPOCH = re.compile(
    r"(?<![\w/.=-])(?i:epoch)['\"‘’]?(?:\s*:\s*|=|\s+)(?P<n>\d+(?:\.\d+)?)(?![\d%])(?:\s*/\s*(?P<total>\d+)(?![\d/]))?"
)
_FRACTION = re.compile(r"(?<![\w./:-])(?P<n>\d+)\s*/\s*(?P<total>\d+)(?![\w./:-])")
_DIGIT = re.compile(r"\d")
_NONFINITE_WORD = re.compile(r"(?i:nan|inf)")
_SOURCE_FILE = re.compile(r"\w\.(?:py|pyx|cu|cuh|cc|cpp|cxx|c|h|hpp|lua|rs|go|java|js|ts|sh)$")
# A metric field: a key of up to four words (`lm loss`, `'train_loss'`, `elapsed time per iteration (ms)`,
# `TFLOP/s/device`), then `:`, `=` or a space, then a number, nan or inf (`loss: 2.3`, `loss=0.36`,
# `'loss': 0.3`, `loss 2.3 |`, `loss: nan`). Fields are read from the line's segments (split at `|`, `,`,
# `;`, tabs, brackets, not at a thousands comma `1,234`); a list value `loss: [0.05 0.06]` gives its first
# number; a key is never a file name (`hooks.py:260`).
_SEGMENTS = re.compile(r"[|;\t{}\]]|,(?!\d{3}(?!\d))|(?<![:=])(?<![:=] )\[| - ")
_VALUE = re.compile(
    r"(?:[:=]|(?<=[A-Za-z_'\")%]) )\s*['\"\[]?"
    r"(?P<value>[-+]?(?:\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?|(?i:nan|inf)(?!\s+[a-z]{2,}))(?![\w./-]|:\S))"
    r"['\"]?(?P<unit>[a-zA-Z/%]*)"
)
_KEY_WORD = re.compile(r"\(?[A-Za-z_][\w./%()-]*")
MAX_KEY_WORDS = 6
# tqdm's rate in its bracket: "5.41it/s", "639.50s/it", "1.2 batch/s" (unit from `unit=`).
_BAR_RATE = re.compile(r"(?P<value>\d+(?:\.\d+)?)\s?(?P<unit>s/\w+|\w+/s)\b")
# The metric words that make a counter line a training-loop line (one is enough).
_METRIC_KEY = re.compile(
    r"(?i:loss|\blr\b|learning[ _]rate|acc|ppl|perplexity|reward|grad[ _]?norm|\bkl\b|entropy|\bmfu\b|tflop|"
    r"tokens?/s|samples?/s|examples?/s|it/s|throughput|\bwps\b|\bups\b)"
)
# Rates (higher is better unless noted) by metric name of the slowdown detector (app/domain/detection/slowdown.py).
_RATES: tuple[tuple[str, re.Pattern[str], float], ...] = (
    ("tokens_per_s", re.compile(r"(?i:\btokens?(?:[ _]per[ _]second|/s(?:ec)?)\b|\btps\b|\btok/s\b|\bwps\b)"), 1.0),
    (
        "samples_per_s",
        re.compile(r"(?i:samples?(?:[ _]per[ _]second|/s(?:ec)?)\b|examples?(?:/s(?:ec)?|[ _]per[ _]second)\b)"),
        1.0,
    ),
    ("tflops_per_gpu", re.compile(r"(?i:tflop/s/(?:gpu|device)|tflops[ _]per[ _](?:gpu|device))"), 1.0),
    ("tflops", re.compile(r"(?i:^tflops$)"), 1.0),
    ("mfu_pct", re.compile(r"(?i:^mfu$)"), 1.0),
    ("it_per_s", re.compile(r"(?i:^it/s$|(?:global_)?steps?/s(?:ec)?$|steps?[ _]per[ _]second|^ups$)"), 1.0),
    ("iter_ms", re.compile(r"(?i:(?:time per iteration|iter(?:ation)?[ _]time|step[ _]time) \(ms\)|_ms$)"), 1.0),
    ("iter_ms", re.compile(r"(?i:(?:time per iteration|iter(?:ation)?[ _]time|step[ _]time)(?: \(s\))?$)"), 1000.0),
)
MAX_FIELDS = 32


@dataclass(frozen=True)
class StepReading:
    """One counter read from one line: which counter (`key`), its value, its total, and the line's fields.

    `fields` are the line's metric fields (name, value) in order; `strong` says the line alone is evidence
    of a training loop (a total or a metric field next to the counter) and arms without an advance.
    """

    key: str
    value: float
    total: int | None = None
    source: str = "parser"  # parser | template | metrics
    fields: tuple[tuple[str, float], ...] = ()
    strong: bool = False

    @property
    def iteration(self) -> int | None:
        """The value as an iteration number (None for a fractional epoch or a metrics-only line)."""
        if self.source == "metrics" or self.key == "epoch":
            return None
        return int(self.value) if self.value == int(self.value) else None


def parse_fields(line: str, bar_at: int | None = None) -> tuple[tuple[str, float], ...]:
    """The metric fields of a line, (key, value) in order; with `bar_at` (where a tqdm bar's bracket opens) the
    bar's rate comes first, as (`it/s` or its own unit, value)."""
    found: list[tuple[str, float]] = []
    if bar_at is not None:
        rate = _BAR_RATE.search(line, bar_at, bar_at + 80)
        if rate is not None:
            unit = rate["unit"]
            value = float(rate["value"])
            if unit.startswith("s/"):  # slower than one per second: tqdm prints seconds per item
                unit, value = f"{unit[2:]}/s", (1.0 / value if value else 0.0)
            found.append(("it/s" if unit in ("it/s", "step/s", "steps/s", "batch/s", "ba/s") else unit, value))
    for segment in _SEGMENTS.split(line):
        if not segment or _DIGIT.search(segment) is None and not _NONFINITE_WORD.search(segment):
            continue
        taken = 0
        for match in _VALUE.finditer(segment):  # values first, then the words before each: linear in the line
            key = _key_before(segment[taken : match.start()])
            taken = match.end()
            if not key or _SOURCE_FILE.search(key) or len(found) >= MAX_FIELDS:
                continue
            try:
                value = float(match["value"].replace(",", ""))
            except ValueError:
                continue
            unit = match["unit"]
            found.append((f"{key} {unit}" if "/" in unit else key, value))
    return tuple(found)


def _key_before(text: str) -> str:
    """The key of a field: the last words (at most MAX_KEY_WORDS) before its value that start with a letter."""
    words: list[str] = []
    for word in reversed(text.split()):
        word = word.strip("'\"")
        if len(words) >= MAX_KEY_WORDS or not _KEY_WORD.fullmatch(word):
            break
        words.append(word)
    return " ".join(reversed(words))


def _metric_line(fields: tuple[tuple[str, float], ...]) -> bool:
    return any(_METRIC_KEY.search(key) for key, _ in fields)


def parse_step(line: str) -> StepReading | None:
    """The step counter a line carries, or None (for the newest state of a `\\r`-updated bar, pass its last part)."""
    if len(line) > 4096:
        line = line[-4096:]
    if "<" in line and "/" in line and "[" in line:  # a tqdm bar always prints "[elapsed<remaining"
        bars = list(_TQDM.finditer(line))
        if bars:
            bar = bars[-1]  # the last bar on the line is the newest state
            total = int(bar["total"])
            fields = parse_fields(line, bar.end())
            return StepReading(f"bar/{total}", float(bar["n"]), total, fields=fields, strong=True)
    lowered = line.lower()
    if "checkpoint" in lowered or "ckpt" in lowered:
        return None  # names the step it saved or loaded: a checkpoint event (signatures.py), not a step taken
    found: StepReading | None = None
    if "poch" in lowered:
        match = _EPOCH_ITER.search(line)
        if match is not None:
            total = int(match["total"])
            value = int(match["e"]) * (total + 1) + int(match["n"])
            found = StepReading(f"epoch-iter/{total}", float(value), total)
    if found is None and ("step" in lowered or "iter" in lowered or "batch=" in lowered or "batch:" in lowered):
        found = _named(line)
    if found is None and "/" in line and _METRIC_KEY.search(line):
        for match in _FRACTION.finditer(line):
            done, whole = int(match["n"]), int(match["total"])
            if 0 <= done <= whole and whole > 1:
                found = StepReading(f"fraction/{whole}", float(done), whole)
                break
    if found is None and "poch" in lowered:
        match = _EPOCH.search(line)
        if match is not None:
            epochs = int(match["total"]) if match["total"] else None
            if epochs is None or float(match["n"]) <= epochs:
                found = StepReading("epoch", float(match["n"]), epochs)
    if found is None:
        return None
    fields = parse_fields(line)
    strong = found.total is not None or _metric_line(fields)
    return StepReading(found.key, found.value, found.total, fields=fields, strong=strong)


# Words before a counter that make it a place the run will start from, stop at or repeat at, not a step taken:
# "Training starts at step 401", "resuming from iteration 5000", "until step 1000", "every 500 steps".
_NOT_TAKEN = re.compile(
    r"(?i:\b(?:start(?:s|ed|ing)?|begin(?:s|ning)?|resum\w*|restart\w*|from|until|till|up to|every|max(?:imum)?)"
    r"(?:\s+(?:at|from|with|on))?\s+(?:the\s+)?)$"
)


def _named(line: str) -> StepReading | None:
    """A named counter (`iteration 12`, `step: 10`, `'step': 10`, `global_step=10`, `step = 488600`)."""
    for match in _NAMED.finditer(line):
        if match["pl"] and "=" in match["sep"] and match["sep"] != "=":
            continue  # "Total optimization steps = 1000": a setting
        if match["pl"] and match["total"] is None and not match["sep"].strip():
            continue  # "gradient accumulation steps 1", "total steps 1000": a count in a setting, not a counter
        if _NOT_TAKEN.search(line[max(0, match.start() - 40) : match.start()]):
            continue  # "Training starts at step 401": where the run will begin, no step was taken
        keyword = match["kw"].lower().replace(" ", "_")
        named_total = int(match["total"]) if match["total"] else None
        if keyword == "batch" and named_total is None:
            continue  # "batch 32" is a size; only "batch=3108/3200" (Composer) counts batches done
        if keyword == "batch" and "=" not in match["sep"] and ":" not in match["sep"]:
            continue
        if named_total is None or int(match["n"]) <= named_total:
            key = keyword if named_total is None else f"{keyword}/{named_total}"
            return StepReading(key, float(match["n"]), named_total)
        return None
    return None


def parse_metrics(line: str) -> StepReading | None:
    """A metrics-only line (no counter): two or more fields, one a metric (`train Loss: 2.7186 Acc: 0.4082`).

    Its key is the set of field names: the same set printed again is the loop going round (StepWatch).
    """
    if len(line) > 4096:
        line = line[-4096:]
    fields = parse_fields(line)
    if len(fields) < 2 or not any(_METRIC_KEY.search(key) and not value.is_integer() for key, value in fields):
        return None  # a metric printed as a whole number ("Loss.cu:455") is more likely a line number or a count
    names = ",".join(sorted({key.lower() for key, _ in fields}))[:200]
    values = float(zlib.crc32(repr([value for _, value in fields]).encode()))  # tells a new line from a repeat
    return StepReading(f"metrics:{names}", values, source="metrics", fields=fields)


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


def rates_of(fields: tuple[tuple[str, float], ...]) -> dict[str, float]:
    """The throughput figures among a reading's fields, by the slowdown detector's metric names."""
    rates: dict[str, float] = {}
    for key, value in fields:
        if value != value or value in (float("inf"), float("-inf")):
            continue
        for metric, pattern, scale in _RATES:
            if metric not in rates and pattern.search(key):
                rates[metric] = value * scale
                break
    return rates


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

    def recurred(self, reading: StepReading) -> bool:
        """True when a line of the same shape (metrics-only key) was seen before with other values (not the
        same line printed by every rank); remembers it either way."""
        previous = self._last.get(reading.key)
        seen = previous is not None and previous != reading.value
        self._last[reading.key] = reading.value
        self._last.move_to_end(reading.key)
        if len(self._last) > self.MAX_KEYS:
            self._last.popitem(last=False)
        return seen

    def seen(self, reading: StepReading) -> bool:
        """True when this counter was read before (without recording anything)."""
        return reading.key in self._last
