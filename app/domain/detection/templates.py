"""Per-log template mining: learn, online, a recurring line template whose integer field keeps growing.

A small Drain-style miner (fixed-depth: the template is the line's tokens with every token holding a
digit masked), written here rather than taking `drain3`: we need one question answered (does a
masked template recur with a field that increases?), not clustering by similarity with persistence;
exact masked-token matching is a dict lookup per line, has no dependencies, and its memory is
bounded per log (MAX_TEMPLATES templates of at most MAX_TOKENS tokens, LRU-evicted).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass, field

from app.domain.detection.progress import StepReading

_DIGIT = re.compile(r"\d")
# A metric value: "2.3", "loss=0.36,", "lr:1e-05", "4401.19ms" (never a time of day "07:45:46.19").
_FLOAT = re.compile(r"[A-Za-z_'\"]*[:=]?[-+]?\d+\.\d+(?:[eE][-+]?\d+)?[A-Za-z%/]*[,;|)\]]*")
_STRIP = "[](){}<>:,;|'\""


@dataclass
class _Template:
    fields: dict[int, tuple[int, int]] = field(default_factory=dict)  # position -> (last value, increases in a row)
    seen: int = 0


class TemplateMiner:
    """Learns recurring templates of one log; `observe` returns a reading when a counter field advanced.

    A field is a counter once it increased STREAK times in a row in lines of the same template that
    also print a metric value (a float): a burst of init lines numbering channels does not qualify.
    """

    MAX_TEMPLATES = 256
    MAX_TOKENS = 32
    MAX_LINE = 512
    STREAK = 2

    def __init__(self) -> None:
        self._templates: OrderedDict[str, _Template] = OrderedDict()
        self.lines = 0

    def observe(self, line: str) -> StepReading | None:
        """Feed one line (oldest first); a StepReading when one of its template's counters advanced."""
        if len(line) > self.MAX_LINE:
            line = line[: self.MAX_LINE]
        if _DIGIT.search(line) is None:
            return None
        self.lines += 1
        tokens = line.split(None, self.MAX_TOKENS)[: self.MAX_TOKENS]
        masked: list[str] = []
        counters: list[tuple[int, int]] = []
        has_word = has_metric = False
        for position, token in enumerate(tokens):
            if _DIGIT.search(token) is None:
                masked.append(token)
                has_word = has_word or token.isalpha()
                continue
            masked.append("<*>")
            value = _integer(token)
            if value is not None:
                counters.append((position, value))
            elif not has_metric and _FLOAT.fullmatch(token):
                has_metric = True
        if not counters or not has_word or not has_metric:
            return None
        key = " ".join(masked)
        template = self._templates.get(key)
        if template is None:
            template = self._templates[key] = _Template()
            if len(self._templates) > self.MAX_TEMPLATES:
                self._templates.popitem(last=False)
        else:
            self._templates.move_to_end(key)
        template.seen += 1
        found: StepReading | None = None
        for position, value in counters:
            last, streak = template.fields.get(position, (None, 0))
            if last is not None:
                if value > last:
                    streak += 1
                elif value < last:
                    streak = 0  # a restart from an earlier checkpoint: learn again
            template.fields[position] = (value, streak)
            if found is None and last is not None and value > last and streak >= self.STREAK:
                found = StepReading(f"template:{_short(key)}:{position}", float(value), source="template")
        return found

    @property
    def templates(self) -> int:
        """How many templates are remembered now (bounded by MAX_TEMPLATES)."""
        return len(self._templates)


def _integer(token: str) -> int | None:
    """A token that is an integer (`12`, `[12]`, `12,`) or a fraction `12/100` (its numerator)."""
    text = token.strip(_STRIP)
    if text.isdigit() and len(text) <= 12:
        return int(text)
    head, slash, tail = text.partition("/")
    if slash and head.isdigit() and tail.isdigit() and len(head) <= 12 and int(head) <= int(tail):
        return int(head)
    return None


def _short(key: str) -> str:
    """A short, stable name for a template (its first words)."""
    words = [w for w in key.split() if w != "<*>"][:3]
    return "_".join(words)[:40] or "line"
