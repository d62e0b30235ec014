"""Job-controlled paths open only as the job's user could: no symlink, no FIFO/socket/device, no other user's file."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.jobfiles import safe_open
from app.jobfiles.safe_open import AccessRule, Refused

NOBODY = 65534
ME = os.getuid()
MINE = AccessRule(uid=ME, gids=frozenset({os.getgid()}))


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory every user may enter (pytest's tmp_path lies below a 0700 directory)."""
    path = Path(tempfile.mkdtemp(prefix="safe-open-", dir="/tmp"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def refusal(path: Path | str, rule: AccessRule = MINE) -> str:
    """The reason `path` is refused under `rule` (the test fails when it opens)."""
    with pytest.raises(Refused) as caught:
        fd, _ = safe_open.open_file(str(path), rule)
        os.close(fd)
    return caught.value.reason


def read(path: Path | str, rule: AccessRule = MINE) -> bytes:
    fd, st = safe_open.open_file(str(path), rule)
    try:
        assert stat.S_ISREG(st.st_mode)
        return os.pread(fd, 1 << 16, 0)
    finally:
        os.close(fd)


def test_own_regular_file_opens(tmp_path: Path) -> None:
    path = tmp_path / "train.out"
    path.write_bytes(b"step 1\n")
    assert read(path) == b"step 1\n"
    assert read(str(tmp_path / "." / "train.out")) == b"step 1\n"  # lexical normalisation is fine


def test_symlink_as_the_final_component_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("password\n")
    (tmp_path / "train.out").symlink_to(secret)
    assert refusal(tmp_path / "train.out") == safe_open.SYMLINK
    (tmp_path / "environ.out").symlink_to("/proc/self/environ")
    assert refusal(tmp_path / "environ.out") == safe_open.SYMLINK


def test_symlink_in_a_directory_component_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "train.out").write_text("x\n")
    (tmp_path / "logs").symlink_to(real)
    assert refusal(tmp_path / "logs" / "train.out") == safe_open.SYMLINK
    (tmp_path / "proc").symlink_to("/proc/self")
    assert refusal(tmp_path / "proc" / "environ") == safe_open.SYMLINK


def test_dotdot_cannot_climb_through_a_symlink(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "train.out").write_text("ok\n")
    (tmp_path / "b").symlink_to("/etc")
    assert refusal(f"{tmp_path}/b/passwd") == safe_open.SYMLINK
    assert read(f"{tmp_path}/b/../a/train.out") == b"ok\n"  # normalised first: b is never entered


def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "train.out"
    os.mkfifo(fifo)
    outcome: list[str] = []
    worker = threading.Thread(target=lambda: outcome.append(refusal(fifo)), daemon=True)
    worker.start()
    worker.join(timeout=5)
    assert not worker.is_alive(), "opening a FIFO blocked"
    assert outcome == [safe_open.NOT_REGULAR]


def test_socket_directory_and_device_are_refused(tmp_path: Path) -> None:
    sock_path = tmp_path / "s.out"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock_path))
    try:
        assert refusal(sock_path) == safe_open.NOT_REGULAR
    finally:
        server.close()
    (tmp_path / "dir.out").mkdir()
    assert refusal(tmp_path / "dir.out") == safe_open.NOT_REGULAR
    assert refusal("/dev/null", AccessRule(uid=0)) == safe_open.NOT_REGULAR
    assert refusal("/dev/zero", AccessRule(uid=0, mode=safe_open.READABLE)) == safe_open.NOT_REGULAR


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_file_of_another_uid_is_refused_in_owner_mode(tmp_path: Path) -> None:
    path = tmp_path / "train.out"
    path.write_text("someone else's\n")
    os.chown(path, NOBODY, NOBODY)
    assert refusal(path, AccessRule(uid=ME + 4242)) == safe_open.WRONG_OWNER
    assert read(path, AccessRule(uid=NOBODY)) == b"someone else's\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_readable_mode_follows_the_mode_bits_and_groups(shared_dir: Path) -> None:
    tmp_path = shared_dir
    job = 4242
    path = tmp_path / "train.out"
    path.write_text("data\n")
    os.chown(path, NOBODY, 4343)
    readable = safe_open.READABLE
    os.chmod(path, 0o600)  # another user's private file
    assert refusal(path, AccessRule(uid=job, mode=readable)) == safe_open.NOT_READABLE
    assert refusal(path, AccessRule(uid=job, gids=frozenset({4343}), mode=readable)) == safe_open.NOT_READABLE
    os.chmod(path, 0o640)  # the group may read: only a member of it
    assert refusal(path, AccessRule(uid=job, mode=readable)) == safe_open.NOT_READABLE
    assert read(path, AccessRule(uid=job, gids=frozenset({4343}), mode=readable)) == b"data\n"
    os.chmod(path, 0o604)  # other may read but the group may not: a member of the group may not
    assert read(path, AccessRule(uid=job, mode=readable)) == b"data\n"
    assert refusal(path, AccessRule(uid=job, gids=frozenset({4343}), mode=readable)) == safe_open.NOT_READABLE
    os.chown(path, job, 4343)
    os.chmod(path, 0o044)  # the owner's own bits decide for the owner
    assert refusal(path, AccessRule(uid=job, mode=readable)) == safe_open.NOT_READABLE
    # the owner rule ignores the bits but not the owner
    assert read(path, AccessRule(uid=job)) == b"data\n"
    # a directory on the way the job's user cannot enter
    os.chmod(path, 0o644)
    inner = tmp_path / "private"
    inner.mkdir()
    (inner / "train.out").write_text("x\n")
    os.chown(inner / "train.out", job, job)
    os.chown(inner, NOBODY, NOBODY)
    os.chmod(inner, 0o700)
    assert refusal(inner / "train.out", AccessRule(uid=job, mode=readable)) == safe_open.NOT_READABLE


def test_unknown_uid_fails_closed_unless_world_readable_is_chosen(shared_dir: Path, tmp_path: Path) -> None:
    hidden = tmp_path / "train.out"
    hidden.write_text("x\n")
    assert refusal(hidden, AccessRule(uid=None, unknown_uid=safe_open.WORLD_READABLE)) == safe_open.NOT_READABLE
    tmp_path = shared_dir
    path = tmp_path / "train.out"
    path.write_text("x\n")
    os.chmod(path, 0o600)
    assert refusal(path, AccessRule(uid=None)) == safe_open.UID_UNKNOWN
    loose = AccessRule(uid=None, unknown_uid=safe_open.WORLD_READABLE)
    assert refusal(path, loose) == safe_open.UID_UNKNOWN
    os.chmod(path, 0o644)
    assert read(path, loose) == b"x\n"


def test_relative_paths_are_refused_and_missing_files_are_missing(tmp_path: Path) -> None:
    assert refusal("train.out") == safe_open.NOT_ABSOLUTE
    with pytest.raises(FileNotFoundError):
        safe_open.open_file(str(tmp_path / "nope" / "train.out"), MINE)
    with pytest.raises(FileNotFoundError):
        safe_open.open_file(str(tmp_path / "train.out"), MINE)


def test_a_configured_root_is_trusted_as_configured(tmp_path: Path) -> None:
    real = tmp_path / "real-logs"
    real.mkdir()
    (real / "job-7.out").write_text("hello\n")
    (tmp_path / "logs").symlink_to(real)  # the operator's RECOVERY_LOG_DIRS entry is a symlink
    trusting = AccessRule(uid=ME, roots=(str(tmp_path / "logs"),))
    assert read(tmp_path / "logs" / "job-7.out", trusting) == b"hello\n"
    assert refusal(tmp_path / "logs" / "job-7.out") == safe_open.SYMLINK  # without the root: a symlink
    (real / "job-8.out").symlink_to("/etc/hostname")  # below the root no symlink is followed
    assert refusal(tmp_path / "logs" / "job-8.out", trusting) == safe_open.SYMLINK


def test_for_job_adds_the_users_groups_only_for_the_same_user() -> None:
    rule = AccessRule.for_job(uid=0, gid=0, user_name="root", mode=safe_open.READABLE)
    assert 0 in rule.gids and rule.uid == 0
    stranger = AccessRule.for_job(uid=0, gid=77, user_name="not-root-here")
    assert stranger.gids == frozenset({77})
