"""The adoption rule: an installation acts only on attempt ends it observed; the rest is history.

An attempt is *adopted* (recorded, never decided) when its end was not observed by this installation:
it was first seen already ended while nobody here was watching (a new or restored database, the first
look of a restarted worker), or it ended before the installation first saw it live. An attempt that
started and ended between two consecutive looks of a watching observer was observed: it ended after
the previous complete look.
"""

from __future__ import annotations

import datetime as dt

# Slurm reports whole seconds (truncated); our clock has microseconds.
CLOCK_SLACK = dt.timedelta(seconds=2)

# What an adopted attempt says where users look: its ended reason (API, dashboard) and its story.
NOT_ACTED_ON = "ended before Recovery was watching; not acted on"


def adopted_ended_reason(ended_reason: str | None, adopted_reason: str) -> str:
    """An adopted attempt's ended reason: NOT_ACTED_ON with the adoption's reason, then what Slurm said (once)."""
    if ended_reason and ended_reason.startswith(NOT_ACTED_ON):
        return ended_reason
    text = f"{NOT_ACTED_ON} ({adopted_reason})"
    return f"{text}; {ended_reason}" if ended_reason else text


def adoption_reason(
    *,
    ended: bool,
    state: str,
    first_seen_running_at: dt.datetime | None,
    end_time: dt.datetime | None,
    watching_since: dt.datetime | None,
) -> str | None:
    """Why this ended attempt is history only, or None when this installation observed its end.

    ``watching_since``: when the observer's previous complete look at Slurm was taken in this run
    (None on its first look, or when the caller is not the observer's continuous watch).
    """
    if not ended:
        return None
    when = f" at {end_time.isoformat()}" if end_time is not None else ""
    if first_seen_running_at is not None:
        if end_time is not None and end_time < first_seen_running_at - CLOCK_SLACK:
            return (
                f"it ended ({state}){when}, before this installation first saw it running "
                f"at {first_seen_running_at.isoformat()}"
            )
        return None
    if watching_since is not None and (end_time is None or end_time >= watching_since - CLOCK_SLACK):
        return None  # it ran and ended between two of our looks
    if watching_since is None:
        return (
            f"first seen already ended ({state}{when}) on this installation's first look at Slurm: "
            "its end was not observed here (new, restored or moved database, or a restarted worker)"
        )
    return (
        f"first seen already ended ({state}{when}), before this installation's previous look at "
        f"{watching_since.isoformat()}: its end was not observed here"
    )
