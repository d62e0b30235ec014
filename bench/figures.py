"""The machine-readable last lines every bench prints, one per measured goal.

    figure <name> <value> <unit> goal <op> <target>

for example `figure graphql_first_page_vs_floor 1.7 x goal <= 2`. `parse` reads them back (tests, scripts).
"""

from __future__ import annotations

import math
import re
import sys
from typing import IO, NamedTuple

OPS = ("<=", ">=", "<", ">", "==")
LINE = re.compile(r"^figure ([a-z][a-z0-9_]*) (-?[0-9]+(?:\.[0-9]+)?|nan) (\S+) goal (<=|>=|<|>|==) (-?[0-9.]+)$")


class Figure(NamedTuple):
    name: str
    value: float
    unit: str
    op: str
    target: float

    @property
    def met(self) -> bool:
        """Whether the value meets its goal (a value that could not be measured never does)."""
        if math.isnan(self.value):
            return False
        return {
            "<=": self.value <= self.target,
            ">=": self.value >= self.target,
            "<": self.value < self.target,
            ">": self.value > self.target,
            "==": self.value == self.target,
        }[self.op]


def _number(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"


def figure(name: str, value: float, unit: str, op: str, target: float, out: IO[str] | None = None) -> Figure:
    """Print one figure line (to stdout unless `out` is given); returns what it printed."""
    if op not in OPS:
        raise ValueError(f"unknown goal operator {op!r}")
    shown = Figure(name, float(value), unit, op, float(target))
    (out or sys.stdout).write(f"figure {name} {_number(shown.value)} {unit} goal {op} {_number(target)}\n")
    (out or sys.stdout).flush()
    return shown


def parse(text: str) -> list[Figure]:
    """Every well-formed figure line of a bench's output, in order."""
    found = []
    for line in text.splitlines():
        match = LINE.match(line.strip())
        if match:
            name, value, unit, op, target = match.groups()
            found.append(Figure(name, float(value), unit, op, float(target)))
    return found
