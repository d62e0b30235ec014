"""Open a path a job controls as the job's own user could: no symlink followed, never blocking, only what it may read.

Every reader of a job-controlled path (the collector's StdOut/StdErr and log-directory files, the
dashboard's log view, the checkpoint check) opens it here. The rule: Recovery never shows anyone a
byte the job's own user could not read.

* The path is walked one component at a time from `/` (or from an operator-configured root such as
  a `RECOVERY_LOG_DIRS` entry, which is trusted as configured) with `openat(O_NOFOLLOW)`: a symbolic
  link anywhere below the root is refused, never followed.
* The final component is looked at with `lstat` before it is opened, so a FIFO, socket, device or
  directory is refused without an open; the open itself is `O_NONBLOCK | O_NOFOLLOW`, and `fstat` of
  the opened file must show the same regular file.
* `owner` (the default of `RECOVERY_LOG_ACCESS`): the file must be owned by the job's numeric uid.
  `readable`: the job's user must be able to read it by its mode bits (owner, then group by the
  job's gid and the user's groups, then other) and to search every directory on the way.
* A job whose uid is unknown (recorded before Recovery stored it) is refused unless
  `RECOVERY_LOG_ACCESS_UNKNOWN_UID=world-readable`, which then accepts only files anyone may read.

POSIX ACLs are not consulted: a file readable only through an ACL entry is refused (fail closed).
Offline tools that a user runs on their own files (`recovery check-log FILE`) keep plain opens.
"""

from __future__ import annotations

import errno
import functools
import grp
import os
import pwd
import stat
from collections.abc import Sequence
from dataclasses import dataclass

OWNER = "owner"
READABLE = "readable"
REFUSE = "refuse"
WORLD_READABLE = "world-readable"

# Refusal reasons (the `reason` of a log.refused event)
SYMLINK = "symlink"
NOT_REGULAR = "not-regular-file"
WRONG_OWNER = "wrong-owner"
NOT_READABLE = "not-readable"
UID_UNKNOWN = "uid-unknown"
NOT_ABSOLUTE = "not-absolute"
REASONS = (SYMLINK, NOT_REGULAR, WRONG_OWNER, NOT_READABLE, UID_UNKNOWN, NOT_ABSOLUTE)

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class Refused(Exception):
    """A job-controlled path that is not read: `reason` is one of REASONS, `detail` says why in words."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class AccessRule:
    """Whose rights a job-controlled path is opened with (the job's uid and groups) and how strictly."""

    uid: int | None
    gids: frozenset[int] = frozenset()
    mode: str = OWNER
    unknown_uid: str = REFUSE
    roots: tuple[str, ...] = ()  # operator-configured directories, trusted as configured (symlinks there are fine)

    @classmethod
    def for_job(
        cls,
        *,
        uid: int | None,
        gid: int | None,
        user_name: str | None = None,
        mode: str = OWNER,
        unknown_uid: str = REFUSE,
        roots: Sequence[str] = (),
    ) -> AccessRule:
        """The rule for a job: its uid, its gid and (when this host knows the user by name and uid) its groups."""
        gids = _groups(uid, gid, user_name or "") if uid is not None else frozenset()
        return cls(uid, gids, mode, unknown_uid, tuple(os.path.normpath(r) for r in roots if r))


@functools.lru_cache(maxsize=4096)
def _groups(uid: int, gid: int | None, user_name: str) -> frozenset[int]:
    found = {gid} if gid is not None else set()
    try:
        entry = pwd.getpwuid(uid)
    except (KeyError, OverflowError):
        return frozenset(found)
    if user_name and entry.pw_name != user_name:
        return frozenset(found)  # another user of that uid here: trust only what Slurm said
    try:
        found.update(os.getgrouplist(entry.pw_name, entry.pw_gid if gid is None else gid))
    except OSError:
        found.update(g.gr_gid for g in grp.getgrall() if entry.pw_name in g.gr_mem)
    return frozenset(found)


def kind_of(mode: int) -> str:
    """A file type in words (for refusals)."""
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "not a regular file"


def may_read(st: os.stat_result, rule: AccessRule) -> bool:
    """The job's user may read this by its mode bits (only the bits of the class it falls in count)."""
    return _permitted(st, rule, stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH)


def may_search(st: os.stat_result, rule: AccessRule) -> bool:
    """The job's user may pass through this directory."""
    return _permitted(st, rule, stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH)


def _permitted(st: os.stat_result, rule: AccessRule, user_bit: int, group_bit: int, other_bit: int) -> bool:
    if rule.uid is None:
        return bool(st.st_mode & other_bit)
    if rule.uid == 0:
        return True  # root reads every regular file
    if st.st_uid == rule.uid:
        return bool(st.st_mode & user_bit)
    if st.st_gid in rule.gids:
        return bool(st.st_mode & group_bit)
    return bool(st.st_mode & other_bit)


def check_file(st: os.stat_result, rule: AccessRule, path: str) -> None:
    """Refuse anything but a regular file the rule lets the job's user read."""
    if not stat.S_ISREG(st.st_mode):
        reason = SYMLINK if stat.S_ISLNK(st.st_mode) else NOT_REGULAR
        raise Refused(reason, f"{path} is {kind_of(st.st_mode)}")
    check_owner(st, rule, path)


def check_owner(st: os.stat_result, rule: AccessRule, path: str) -> None:
    """Refuse an entry (file or directory) that the job's user does not own (owner) or may not read (readable)."""
    if rule.uid is None:
        if rule.unknown_uid == WORLD_READABLE and may_read(st, rule):
            return
        raise Refused(UID_UNKNOWN, f"the job's user id is unknown, so {path} is not read")
    if rule.mode == READABLE:
        if not may_read(st, rule):
            raise Refused(
                NOT_READABLE,
                f"{path} (owner uid {st.st_uid}, gid {st.st_gid}, mode {stat.S_IMODE(st.st_mode):04o}) "
                f"is not readable by the job's user (uid {rule.uid})",
            )
        return
    if st.st_uid != rule.uid:
        raise Refused(WRONG_OWNER, f"{path}: owner uid {st.st_uid} is not the job's uid {rule.uid}")


def _trusted_root(path: str, roots: Sequence[str]) -> str:
    best = "/"
    for root in roots:
        if (path == root or path.startswith(root.rstrip("/") + "/")) and len(root) > len(best):
            best = root
    return best


def _step(dir_fd: int, name: str, shown: str) -> int:
    """Open directory `name` below dir_fd without following a symlink (Refused) or raise FileNotFoundError."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            raise exc from None
        if stat.S_ISLNK(st.st_mode):
            raise Refused(SYMLINK, f"{shown} is a symbolic link") from None
        if exc.errno == errno.ENOTDIR or not stat.S_ISDIR(st.st_mode):
            raise FileNotFoundError(errno.ENOTDIR, f"{shown} is not a directory") from None
        raise


def open_dir(path: str, rule: AccessRule) -> int:
    """An fd on directory `path`, reached without following a symlink below its trusted root."""
    if rule.uid is None and rule.unknown_uid == REFUSE:
        raise Refused(UID_UNKNOWN, f"the job's user id is unknown, so {path} is not read")
    if not os.path.isabs(path):
        raise Refused(NOT_ABSOLUTE, f"{path} is not an absolute path")
    path = os.path.normpath(path)
    root = _trusted_root(path, rule.roots)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        shown = root.rstrip("/")
        for name in path[len(root) :].split("/"):
            if not name:
                continue
            shown = f"{shown}/{name}"
            nfd = _step(fd, name, shown)
            os.close(fd)
            fd = nfd
            if rule.mode == READABLE or rule.uid is None:
                st = os.fstat(fd)
                if not may_search(st, rule):
                    raise Refused(NOT_READABLE, f"the job's user (uid {rule.uid}) cannot enter {shown}")
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_at(dir_fd: int, name: str, rule: AccessRule, shown: str) -> tuple[int, os.stat_result]:
    """Open regular file `name` in dir_fd for reading (fd, fstat), or raise Refused / FileNotFoundError."""
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    check_file(st, rule, shown)  # a FIFO, socket or device is refused before any open
    fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino):
            check_file(opened, rule, shown)  # replaced between the look and the open: judge what was opened
        return fd, opened
    except BaseException:
        os.close(fd)
        raise


def open_file(path: str, rule: AccessRule) -> tuple[int, os.stat_result]:
    """Open a job-controlled file for reading as the rule allows: (fd, fstat); Refused or FileNotFoundError else."""
    if not os.path.isabs(path):
        raise Refused(NOT_ABSOLUTE, f"{path} is not an absolute path")
    normal = os.path.normpath(path)
    parent, name = os.path.split(normal)
    if not name:
        raise Refused(NOT_REGULAR, f"{path} is a directory")
    dir_fd = open_dir(parent, rule)
    try:
        return open_at(dir_fd, name, rule, normal)
    finally:
        os.close(dir_fd)
