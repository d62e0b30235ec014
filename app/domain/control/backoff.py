"""Exponential backoff: the one formula every retry loop (worker services, the controller) uses."""

from __future__ import annotations

import random

MAX_DOUBLINGS = 10


def exponential(failures: int, *, base: float, cap: float) -> float:
    """`base` doubled per consecutive failure (at most MAX_DOUBLINGS times), never more than `cap` seconds."""
    return min(cap, base * float(2 ** min(max(failures, 0), MAX_DOUBLINGS)))


def jittered(delay: float, *, rng: random.Random | None = None) -> float:
    """`delay` spread over 75-125 % so that loops failing together do not retry together."""
    return delay * (0.75 + (rng or random).random() / 2)
