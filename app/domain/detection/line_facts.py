"""Facts carried by one log line besides its meaning: source timestamp, attempt label, identity."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta, timezone, tzinfo

_MONTHS = {
    m: i
    for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), start=1)
}

# One alternation, tried left to right at each position, so the earliest timestamp in the line wins.
_TIMESTAMP = re.compile(
    r"(?P<iso>(?P<Y>\d{4})-(?P<m>\d{2})-(?P<d>\d{2})[T ](?P<H>\d{2}):(?P<M>\d{2}):(?P<S>\d{2})"
    r"(?:[.,](?P<frac>\d{1,9}))?(?P<tz>Z|[+-]\d{2}:?\d{2})?)"
    r"|(?<![\w])(?P<glog>[IWEF](?P<gm>\d{2})(?P<gd>\d{2}) "
    r"(?P<gH>\d{2}):(?P<gM>\d{2}):(?P<gS>\d{2})(?:\.(?P<gfrac>\d{1,9}))?)"
    r"|(?<![\w])(?P<sys>(?P<smon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) "
    r"{1,2}(?P<sd>\d{1,2}) (?P<sH>\d{2}):(?P<sM>\d{2}):(?P<sS>\d{2}))"
)
_ATTEMPT = re.compile(r"\"?slurm_job_attempt\"?\s*[=:]\s*\"?(\d{1,6})\b")


def _micro(frac: str | None) -> int:
    return int((frac or "0")[:6].ljust(6, "0"))


def _offset(tz: str) -> tzinfo:
    if tz == "Z":
        return UTC
    sign = -1 if tz[0] == "-" else 1
    digits = tz[1:].replace(":", "")
    return timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:4])))


def _yearless(
    month: int, day: int, hour: int, minute: int, second: int, micro: int, now: datetime, tz: tzinfo
) -> datetime | None:
    """Dates without a year are this year's, or last year's when that would lie in the future (New Year)."""
    local_now = now.astimezone(tz)
    for year in (local_now.year, local_now.year - 1):
        try:
            value = datetime(year, month, day, hour, minute, second, micro, tzinfo=tz)
        except ValueError:
            continue  # 29 Feb in a non-leap year
        if value <= local_now + timedelta(days=1):
            return value
    return None


def parse_timestamp(line: str, *, now: datetime, default_tz: tzinfo = UTC) -> datetime | None:
    """The first timestamp in the line, timezone-aware (naive ones are taken to be in default_tz).

    Understands ISO 8601 (also `YYYY-MM-DD HH:MM:SS` in brackets and Python logging's `,mmm`),
    PyTorch/glog `[W1130 02:34:15.123]` and syslog `Nov 30 02:34:15` (both without a year).
    """
    match = _TIMESTAMP.search(line, 0, 400)
    if match is None:
        return None
    try:
        if match.group("iso"):
            tz = _offset(match.group("tz")) if match.group("tz") else default_tz
            return datetime(
                int(match["Y"]),
                int(match["m"]),
                int(match["d"]),
                int(match["H"]),
                int(match["M"]),
                int(match["S"]),
                _micro(match["frac"]),
                tzinfo=tz,
            )
        if match.group("glog"):
            return _yearless(
                int(match["gm"]),
                int(match["gd"]),
                int(match["gH"]),
                int(match["gM"]),
                int(match["gS"]),
                _micro(match["gfrac"]),
                now,
                default_tz,
            )
        return _yearless(
            _MONTHS[match["smon"]],
            int(match["sd"]),
            int(match["sH"]),
            int(match["sM"]),
            int(match["sS"]),
            0,
            now,
            default_tz,
        )
    except ValueError:
        return None  # looked like a timestamp but is not a date (month 13, hour 25)


def attempt_label(line: str) -> int | None:
    """The `slurm_job_attempt` label on the line (`=N`, `: N` or JSON `"slurm_job_attempt": N`)."""
    if "slurm_job_attempt" not in line:
        return None
    match = _ATTEMPT.search(line)
    return int(match.group(1)) if match else None


def event_identity(path: str, inode: int | None, offset: int, raw_line: bytes) -> str:
    """Deterministic id of one line occurrence: the same bytes re-read give the same id."""
    line_hash = hashlib.sha256(raw_line).hexdigest()
    key = f"{path}\0{inode if inode is not None else ''}\0{offset}\0{line_hash}".encode("utf-8", "surrogateescape")
    return hashlib.sha256(key).hexdigest()[:32]


def decode_line(raw: bytes) -> str:
    """Bytes of a kept line as text: invalid UTF-8 replaced, trailing CR dropped."""
    return raw.decode("utf-8", errors="replace").rstrip("\r")


# Bash's xtrace of a command substitution: `++ srun ... helper.sh` (two or more `+`, nested in `$(...)`).
_SUBSTITUTED_SRUN = re.compile(r"^\+{2,} (?:\S+=\S+ )*srun\b")
_XTRACE = re.compile(r"^\++ ")
_SRUN_STEP_EXIT = re.compile(r"^srun: error: [\w.\-]+: tasks? [\d,\-]+: Exited with exit code \d+")


def helper_step_exit(line: str, lines_before: Iterable[str]) -> bool:
    """srun's `task N: Exited with exit code N` for a step the batch script ran inside a command substitution
    (`++ srun ... helper.sh` is the nearest traced command above): a helper whose output the script captures,
    not the job's training step; the script goes on after it."""
    if not _SRUN_STEP_EXIT.match(line):
        return False
    for text in lines_before:  # nearest first
        if _XTRACE.match(text):
            return bool(_SUBSTITUTED_SRUN.match(text))
    return False
