"""Notification targets and their rules (pure): `[terminate,abandoned]json://host/hook` -> a Target."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

TERMINATE, RESTART, ABANDONED, WATCHDOG_RELEASE = "terminate", "restart", "abandoned", "watchdog_release"
# Hooks for events a later change adds (the names are accepted in rules already).
RESTART_STORM, NODE_SUSPECT = "restart_storm", "node_suspect"
BUDGET_EXCEEDED = "budget_exceeded"  # a restart held past a recovery budget (app/fleet)
EVENTS = (TERMINATE, RESTART, ABANDONED, WATCHDOG_RELEASE, RESTART_STORM, NODE_SUSPECT, BUDGET_EXCEEDED)
# A target without rules gets what needs a person: a run stopped for good, or a hold released by the watchdog.
DEFAULT_EVENTS = frozenset({TERMINATE, ABANDONED, WATCHDOG_RELEASE, RESTART_STORM, NODE_SUSPECT, BUDGET_EXCEEDED})

_RULES = re.compile(r"^\[(?P<events>[^\]]*)\](?P<url>.+)$")
_URL = re.compile(r"[a-z][a-z0-9+.-]*://[^\s'\"<>]+", re.I)
_SECRET = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:/@\s]*):(?P<password>[^@/\s]+)@", re.I)


class TargetError(ValueError):
    """A notification target that cannot be used."""


@dataclass(frozen=True)
class Target:
    """One apprise URL and the events it receives; `key` identifies it in the outbox without the URL."""

    url: str
    events: frozenset[str]

    @property
    def key(self) -> str:
        return hashlib.sha256(self.url.encode()).hexdigest()[:24]

    @property
    def masked(self) -> str:
        return mask_url(self.url)

    def wants(self, event: str) -> bool:
        return event in self.events


def mask_url(text: str) -> str:
    """Hide secrets in the URLs of a text: passwords (`scheme://user:***@host`) and long tokens in their paths.

    Only URLs (`scheme://...`) are touched, so file paths and other words in a log line stay readable.
    """
    return _URL.sub(_mask_one, text)


def _mask_one(found: re.Match[str]) -> str:
    url = _SECRET.sub(lambda m: f"{m['scheme']}{m['user']}:***@", found.group(0))
    # Webhook URLs carry their secret in the path (Slack, Teams tokens): keep only the first characters.
    return re.sub(r"(?<=/)([A-Za-z0-9_\-]{6})[A-Za-z0-9_\-]{10,}", r"\1***", url)


def parse_target(entry: str) -> Target:
    """`URL` (default events) or `[event,event]URL`; `[*]` means every event."""
    entry = entry.strip()
    events = DEFAULT_EVENTS
    found = _RULES.match(entry)
    if found:
        names = {name.strip().lower() for name in found["events"].split(",") if name.strip()}
        if names == {"*"}:
            events = frozenset(EVENTS)
        else:
            unknown = names - set(EVENTS)
            if unknown or not names:
                raise TargetError(
                    f"unknown notification event(s) {', '.join(sorted(unknown)) or '(none)'} in "
                    f"{mask_url(entry)!r}; expected some of {', '.join(EVENTS)} or *"
                )
            events = frozenset(names)
        entry = found["url"].strip()
    if "://" not in entry:
        raise TargetError(f"not a notification URL: {mask_url(entry)!r} (expected e.g. json://host/path)")
    return Target(entry, events)


def parse_targets(entries: tuple[str, ...]) -> tuple[Target, ...]:
    """Every configured target, in order; a bad one raises TargetError."""
    return tuple(parse_target(entry) for entry in entries if entry.strip())


def backoff_seconds(tries: int, *, base: float, ceiling: float) -> float:
    """Delay before the next try after `tries` failures: base * 2^(tries-1), at most `ceiling`."""
    return min(ceiling, base * float(2 ** max(0, min(tries - 1, 20))))
