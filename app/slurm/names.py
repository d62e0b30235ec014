"""Slurm's naming mini-languages: hostlists (node[1-3]) and output filename patterns (%x-%j.out)."""

from __future__ import annotations

import re
from functools import lru_cache

_NONE_WORDS = frozenset({"", "None", "none", "(null)", "Unknown", "N/A"})
# Slurm's marker for "no array task" (NO_VAL - 1), which %a expands to for ordinary jobs.
NO_ARRAY_TASK = "4294967294"


# ---------------------------------------------------------------- host lists


@lru_cache(maxsize=8192)
def expand_hostlist(hostlist: str) -> tuple[str, ...]:
    """Expand a Slurm hostlist: "node[1-3],gpu[01-02]-ib" -> node1, node2, node3, gpu01-ib, gpu02-ib."""
    if not hostlist or hostlist in _NONE_WORDS:
        return ()
    if "[" not in hostlist:
        return tuple(part for part in hostlist.split(",") if part)
    hosts: list[str] = []
    for item in _split_top_level(hostlist):
        hosts.extend(_expand_item(item))
    return tuple(hosts)


def _split_top_level(hostlist: str) -> list[str]:
    items, depth, start = [], 0, 0
    for index, char in enumerate(hostlist):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            items.append(hostlist[start:index])
            start = index + 1
    items.append(hostlist[start:])
    return [item for item in items if item]


def _expand_item(item: str) -> list[str]:
    open_at = item.find("[")
    close_at = item.find("]", open_at)
    if open_at < 0 or close_at < 0:
        return [item]
    prefix, ranges, rest = item[:open_at], item[open_at + 1 : close_at], item[close_at + 1 :]
    suffixes = _expand_item(rest) if "[" in rest else [rest]
    hosts = []
    for part in ranges.split(","):
        low, _, high = part.partition("-")
        if not high:
            numbers = [low]
        elif low.isdigit() and high.isdigit():
            width = len(low)
            numbers = [str(n).zfill(width) for n in range(int(low), int(high) + 1)]
        else:
            numbers = [part]
        for number in numbers:
            for suffix in suffixes:
                hosts.append(f"{prefix}{number}{suffix}")
    return hosts


# ---------------------------------------------------------------- output file patterns

_PATTERN = re.compile(r"%(\d*)([%AaJjNnstuxb])")


@lru_cache(maxsize=1024)
def _pattern_parts(pattern: str) -> tuple[tuple[tuple[str, str, str, str], ...], str]:
    """The pattern cut at its % fields: ((text before, width, letter, the field as written), ...) and the tail.

    A cluster's jobs share a few patterns (`%x-%j.out`), so each is cut once, not once per job and tick.
    """
    parts = []
    position = 0
    for match in _PATTERN.finditer(pattern):
        parts.append((pattern[position : match.start()], match.group(1), match.group(2), match.group(0)))
        position = match.end()
    return tuple(parts), pattern[position:]


def expand_filename(
    pattern: str | None,
    *,
    job_id: int,
    name: str = "",
    user: str = "",
    array_job_id: int | None = None,
    array_task_id: int | None = None,
    first_node: str | None = None,
    working_directory: str | None = None,
) -> str | None:
    """Expand Slurm's output filename pattern as slurmstepd does for the batch step.

    %j job id, %J job id (batch step), %x name, %u user, %A array master id (job id for ordinary
    jobs), %a array task id (4294967294 for ordinary jobs; literal on an array's pending record),
    %s "batch", %n and %t 0 (node and task
    of the batch step), %% a literal %, an optional width zero-pads numbers (%3j -> 007). %N is the
    short host name of the batch node: it is filled in only when `first_node` is given (on a real
    cluster the node name is normally its host name; on the lab's emulated nodes slurmstepd uses the
    machine's host name instead, so a %N path there does not match). %b stays literal (22.05 does so).
    A relative path is taken from the working directory.
    """
    if not pattern:
        return None
    if "%" in pattern:
        if not array_job_id:
            array_task: str | None = NO_ARRAY_TASK
        else:  # an array's pending meta record has no task id yet: keep %a for the collector
            array_task = str(array_task_id) if array_task_id is not None else None
        parts, tail = _pattern_parts(pattern)
        pieces = []
        for text, width, letter, field in parts:
            pieces.append(text)
            if letter == "%":
                pieces.append("%")
                continue
            if letter == "j" or letter == "J":
                value = str(job_id)
            elif letter == "x":
                value = name
            elif letter == "u":
                value = user
            elif letter == "A":
                value = str(array_job_id if array_job_id else job_id)
            elif letter == "a" and array_task is not None:
                value = array_task
            elif letter == "s":
                value = "batch"
            elif letter == "n" or letter == "t":
                value = "0"
            elif letter == "N" and first_node:
                value = first_node.split(".", 1)[0]
            else:
                pieces.append(field)
                continue
            pieces.append(value.zfill(int(width)) if width and value.isdigit() else value)
        pieces.append(tail)
        pattern = "".join(pieces)
    if not pattern.startswith("/") and working_directory:
        pattern = working_directory.rstrip("/") + "/" + pattern
    return pattern
