"""Secrets read from files (RECOVERY_*_FILE settings, Kubernetes or systemd credentials): a file's contents stay out
of the process environment, where /proc/<pid>/environ, `ps e` and crash reports can show them."""

from __future__ import annotations

import os
import stat

MAX_SECRET_BYTES = 64 * 1024  # a session secret, client secret or JWT is far smaller; anything bigger is a wrong path


class SecretFileError(ValueError):
    """A secret file that cannot be used; the message names the file and why, never its contents."""


def read_secret_file(path: str, what: str) -> str:
    """The secret in `path`: a regular file of at most MAX_SECRET_BYTES of UTF-8, its trailing newline dropped.

    Opened without blocking (a FIFO in its place refuses instead of hanging the start) and never followed past
    what fstat says is a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise SecretFileError(f"{what}: cannot read {path}: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SecretFileError(f"{what}: {path} is not a regular file")
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_SECRET_BYTES:
            chunk = os.read(fd, MAX_SECRET_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise SecretFileError(f"{what}: cannot read {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if size > MAX_SECRET_BYTES:
        raise SecretFileError(f"{what}: {path} is larger than {MAX_SECRET_BYTES} bytes; is it the right file?")
    try:
        text = b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError:
        raise SecretFileError(f"{what}: {path} is not UTF-8 text") from None
    secret = text.rstrip("\r\n")
    if not secret.strip():
        raise SecretFileError(f"{what}: {path} is empty")
    return secret
