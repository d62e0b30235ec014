"""Read-only, bounded look at a recorded checkpoint path, for the rules in app/domain/decision/checkpoint_rules.py.

The path comes from a job's log line, so it is looked at with the job's rights (app/jobfiles/safe_open.py):
walked from a configured root without following any symlink (a symlink is seen as OUTSIDE, never
followed), only directories the job's user owns (or, with RECOVERY_LOG_ACCESS=readable, may read and
enter) are listed, and only the few small marker files the layouts name are opened (first
MARKER_BYTES, through safe_open). Everything else is looked at with `lstat` only. The walk stops after
`max_entries` entries or `budget` seconds (the snapshot is then `truncated`). It runs in a thread and
the caller also bounds its wait (a stat stuck on a dead NFS server cannot be interrupted, but it no
longer blocks the advisor: the thread is left to finish on its own).
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import time
from collections.abc import Sequence
from dataclasses import replace

from app.domain.decision.checkpoint_rules import (
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
from app.jobfiles import safe_open
from app.jobfiles.safe_open import AccessRule, Refused

log = logging.getLogger("recovery.checkpoint_probe")

MARKER_BYTES = 65536
MAX_DEPTH = 4
REFUSED_PREFIX = "not looked at"


def _within(path: str, roots: Sequence[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _permitted(info: os.stat_result, rule: AccessRule, shown: str) -> bool:
    try:
        safe_open.check_owner(info, rule, shown)
    except Refused:
        return False
    return not stat.S_ISDIR(info.st_mode) or rule.mode != safe_open.READABLE or safe_open.may_search(info, rule)


def _entry(dir_fd: int, name: str, rule: AccessRule, shown: str) -> Entry | None:
    """The entry `name` in dir_fd without following it; OUTSIDE for symlinks and what the job's user may not see."""
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None
    if stat.S_ISLNK(info.st_mode) or not _permitted(info, rule, shown):
        return Entry(OUTSIDE)  # seen, never followed nor opened
    if stat.S_ISDIR(info.st_mode):
        return Entry(DIR, 0, info.st_mtime)
    if stat.S_ISREG(info.st_mode):
        text = None
        if name in MARKER_FILES and info.st_size <= MARKER_BYTES:
            try:
                fd, _ = safe_open.open_at(dir_fd, name, rule, shown)
            except (OSError, Refused):
                fd = -1
            if fd >= 0:
                try:
                    text = os.pread(fd, MARKER_BYTES, 0).decode("utf-8", "replace")
                except OSError:
                    text = None
                finally:
                    os.close(fd)
        return Entry(FILE, info.st_size, info.st_mtime, text)
    return Entry(OUTSIDE)  # FIFOs, sockets, devices: not a checkpoint, never opened


def _open_child(dir_fd: int, name: str) -> int | None:
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None


def _names(dir_fd: int) -> list[str]:
    try:
        with os.scandir(dir_fd) as entries:
            return sorted(entry.name for entry in entries)
    except OSError:
        return []


def snapshot(path: str, *, rule: AccessRule, max_entries: int = 5000, budget: float = 5.0) -> Tree:
    """Walk ``path`` (and look at its parent's marker files) within the entry and time budgets, as the rule allows.

    Raises Refused when the way to ``path`` has a symlink or a directory the job's user may not enter.
    """
    deadline = time.monotonic() + budget
    normal = os.path.normpath(path)
    parent_dir, top_name = os.path.split(normal)
    parent_fd = safe_open.open_dir(parent_dir, rule)
    entries: dict[str, Entry] = {}
    parent: dict[str, Entry] = {}
    truncated = False
    try:
        top = _entry(parent_fd, top_name, rule, normal)
        if top is not None:
            entries[""] = top
        top_fd = _open_child(parent_fd, top_name) if top is not None and top.kind == DIR else None
        stack: list[tuple[int, str, int]] = [(top_fd, "", 0)] if top_fd is not None else []
        try:
            while stack:
                dir_fd, rel, depth = stack.pop()
                try:
                    if depth >= MAX_DEPTH:
                        continue
                    for name in _names(dir_fd):
                        if len(entries) >= max_entries or time.monotonic() > deadline:
                            truncated = True
                            break
                        child_rel = f"{rel}/{name}" if rel else name
                        entry = _entry(dir_fd, name, rule, f"{normal}/{child_rel}")
                        if entry is None:
                            continue
                        entries[child_rel] = entry
                        if entry.kind == DIR:
                            child_fd = _open_child(dir_fd, name)
                            if child_fd is not None:
                                stack.append((child_fd, child_rel, depth + 1))
                finally:
                    os.close(dir_fd)
                if truncated:
                    break
        finally:
            for dir_fd, _, _ in stack:
                os.close(dir_fd)
        if _within(parent_dir, rule.roots):
            for name in sorted(MARKER_FILES):
                entry = _entry(parent_fd, name, rule, os.path.join(parent_dir, name))
                if entry is not None:
                    parent[name] = entry
    finally:
        os.close(parent_fd)
    return Tree(root=path, entries=entries, parent=parent, truncated=truncated)


def check_path(
    path: str | None,
    *,
    framework: str | None,
    roots: Sequence[str],
    access: AccessRule | None = None,
    recorded_iteration: int | None = None,
    previous: CheckResult | None = None,
    max_entries: int = 5000,
    budget: float = 5.0,
) -> CheckResult:
    """The verdict for one recorded checkpoint path, looked at with the job's rights (synchronous).

    `access`: the job's rule (None: this process's own uid, for tools and tests). A refused way to the
    path is UNCHECKED with a message starting with REFUSED_PREFIX and the refusal's reason.
    """
    if not path:
        return unchecked("the checkpoint line names no path", framework=framework)
    if not os.path.isabs(path):
        return unchecked(f"{path} is not an absolute path", path=path, framework=framework)
    configured = [os.path.normpath(r) for r in roots if r]
    if not configured:
        return unchecked("no checkpoint roots are configured", path=path, framework=framework)
    normal = os.path.normpath(path)
    # A root is trusted as configured (also by its real path); below it no symlink is followed.
    trusted = tuple(dict.fromkeys(configured + [os.path.realpath(r) for r in configured]))
    if not _within(normal, trusted):
        return unchecked(f"{path} is outside the configured checkpoint roots", path=path, framework=framework)
    rule = replace(access or AccessRule(uid=os.geteuid()), roots=trusted)
    try:
        tree = snapshot(normal, rule=rule, max_entries=max_entries, budget=budget)
    except Refused as exc:
        return unchecked(f"{REFUSED_PREFIX} ({exc.reason}): {exc.detail}", path=path, framework=framework)
    except OSError:
        tree = Tree(root=normal, entries={}, parent={}, truncated=False)  # the way there does not exist
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
