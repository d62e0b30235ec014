"""Read-only, bounded look at a recorded checkpoint path, for the rules in app/domain/checkpoint_check.py.

Never writes, never opens anything but the few small marker files (first MARKER_BYTES), never follows
a symlink whose target lies outside the configured roots, and stops after `max_entries` entries or
`budget` seconds (the snapshot is then `truncated`). The walk runs in a thread and the caller also
bounds its wait (a stat stuck on a dead NFS server cannot be interrupted, but it no longer blocks
the advisor: the thread is left to finish on its own).
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import time
from collections.abc import Sequence
from pathlib import PurePosixPath

from app.domain.checkpoint_check import (
    DIR,
    FILE,
    MARKER_FILES,
    OUTSIDE,
    CheckResult,
    Entry,
    Tree,
    assess,
    unchecked,
)

log = logging.getLogger("recovery.checkpoint_probe")

MARKER_BYTES = 65536
MAX_DEPTH = 4


def _within(path: str, roots: Sequence[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _real_roots(roots: Sequence[str]) -> list[str]:
    return [os.path.realpath(r) for r in roots if r]


def _entry(path: str, roots: Sequence[str]) -> Entry | None:
    """The entry at ``path`` (a symlink inside the roots as what it points to); None when nothing is there."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISLNK(info.st_mode):
        target = os.path.realpath(path)
        if not _within(target, roots):
            return Entry(OUTSIDE)
        try:
            info = os.stat(target)
        except OSError:
            return None  # a dangling link: nothing loadable there
    if stat.S_ISDIR(info.st_mode):
        return Entry(DIR, 0, info.st_mtime)
    if stat.S_ISREG(info.st_mode):
        text = None
        if os.path.basename(path) in MARKER_FILES and info.st_size <= MARKER_BYTES:
            try:
                with open(path, "rb") as handle:
                    text = handle.read(MARKER_BYTES).decode("utf-8", "replace")
            except OSError:
                text = None
        return Entry(FILE, info.st_size, info.st_mtime, text)
    return Entry(OUTSIDE)  # sockets, devices: not a checkpoint, never opened


def snapshot(path: str, *, roots: Sequence[str], max_entries: int = 5000, budget: float = 5.0) -> Tree:
    """Walk ``path`` (and list its parent's direct children) within the roots, the entry and time budgets."""
    deadline = time.monotonic() + budget
    real = _real_roots(roots)
    entries: dict[str, Entry] = {}
    truncated = False
    top = _entry(path, real)
    if top is not None:
        entries[""] = top
    stack: list[tuple[str, str, int]] = [(path, "", 0)] if top is not None and top.kind == DIR else []
    seen_dirs: set[str] = set()
    while stack:
        current, rel, depth = stack.pop()
        resolved = os.path.realpath(current)
        if resolved in seen_dirs or depth >= MAX_DEPTH:
            continue
        seen_dirs.add(resolved)
        try:
            names = sorted(os.listdir(current))
        except OSError:
            continue
        for name in names:
            if len(entries) >= max_entries or time.monotonic() > deadline:
                truncated = True
                stack.clear()
                break
            child_path = os.path.join(current, name)
            child_rel = f"{rel}/{name}" if rel else name
            entry = _entry(child_path, real)
            if entry is None:
                continue
            entries[child_rel] = entry
            if entry.kind == DIR:
                stack.append((child_path, child_rel, depth + 1))
    parent: dict[str, Entry] = {}
    parent_dir = str(PurePosixPath(path).parent)
    if _within(os.path.realpath(parent_dir), real):
        for name in sorted(MARKER_FILES):
            entry = _entry(os.path.join(parent_dir, name), real)
            if entry is not None:
                parent[name] = entry
    return Tree(root=path, entries=entries, parent=parent, truncated=truncated)


def check_path(
    path: str | None,
    *,
    framework: str | None,
    roots: Sequence[str],
    recorded_iteration: int | None = None,
    previous: CheckResult | None = None,
    max_entries: int = 5000,
    budget: float = 5.0,
) -> CheckResult:
    """The verdict for one recorded checkpoint path (synchronous; see `check_path_bounded`)."""
    if not path:
        return unchecked("the checkpoint line names no path", framework=framework)
    if not os.path.isabs(path):
        return unchecked(f"{path} is not an absolute path", path=path, framework=framework)
    real = _real_roots(roots)
    if not real:
        return unchecked("no checkpoint roots are configured", path=path, framework=framework)
    normal = os.path.normpath(path)
    # The recorded path itself (before symlinks) must lie in a root; symlinks on the way must stay inside.
    if not _within(normal, [os.path.normpath(r) for r in roots if r] + real):
        return unchecked(f"{path} is outside the configured checkpoint roots", path=path, framework=framework)
    parent_real = os.path.realpath(os.path.dirname(normal))
    if not _within(parent_real, real):
        return unchecked(f"{path} leads out of the configured checkpoint roots", path=path, framework=framework)
    tree = snapshot(normal, roots=roots, max_entries=max_entries, budget=budget)
    return assess(tree, framework=framework, recorded_iteration=recorded_iteration, previous=previous)


async def check_path_bounded(path: str | None, *, timeout: float, **kwargs: object) -> CheckResult:
    """`check_path` in a thread; past ``timeout`` seconds the result is UNCHECKED (the run is not penalised)."""
    try:
        return await asyncio.wait_for(
            asyncio.to_thread(check_path, path, budget=timeout, **kwargs),  # type: ignore[arg-type]
            timeout=timeout + 1.0,
        )
    except TimeoutError:
        log.warning("checkpoint check of %s took longer than %.1f s; not counted", path, timeout)
        return unchecked(f"the look at {path} took longer than {timeout:.1f} s", path=path)
