"""The worker's persisted identity: one instance id per data directory and role, plus the host name.

A restarted worker with the same identity is the same worker: it takes its own lease back at once
instead of waiting for it to lapse. An exclusive `flock` on the data directory's lock file proves the
previous process with this identity is gone (the kernel drops the lock when a process dies, kill -9
included); a second process on the same data directory finds the lock taken and runs under a
one-off identity, so two live processes never share a lease holder.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO

log = logging.getLogger("recovery.worker")


@dataclass
class Identity:
    """Who holds a lease: `<host>/<instance id>`; ``persistent`` when it survives restarts (lock held)."""

    holder: str
    persistent: bool
    lock: IO[bytes] | None = None

    def close(self) -> None:
        """Give the data directory's identity up (the next process on it takes it over)."""
        if self.lock is not None:
            self.lock.close()
            self.lock = None


def _one_off(reason: str) -> Identity:
    holder = f"{socket.gethostname()}/{os.getpid()}-{uuid.uuid4().hex[:8]}"
    log.warning("worker identity: %s; running as %s, which a restart will not reclaim", reason, holder)
    return Identity(holder, persistent=False)


def claim(data_dir: str, role: str = "worker") -> Identity:
    """This data directory's identity for ``role``, locked for this process; a one-off identity if that fails."""
    directory = Path(data_dir).expanduser()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        lock = (directory / f"{role}-instance.lock").open("ab")
    except OSError as exc:
        return _one_off(f"data directory {directory} is not writable ({exc})")
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.close()
        return _one_off(f"another live process uses the {role} identity of {directory}")
    path = directory / f"{role}-instance-id"
    try:
        instance = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        instance = ""
    except OSError as exc:
        lock.close()
        return _one_off(f"cannot read {path} ({exc})")
    if not instance:
        instance = uuid.uuid4().hex[:12]
        try:
            tmp = path.with_suffix(".tmp")
            tmp.write_text(instance + "\n", encoding="utf-8")
            os.replace(tmp, path)
        except OSError as exc:
            lock.close()
            return _one_off(f"cannot write {path} ({exc})")
    return Identity(f"{socket.gethostname()}/{instance}", persistent=True, lock=lock)
