"""Which accounting row is an attempt's own: matched by the attempt's time window, never by position alone."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from app.domain.control import states
from app.slurm.records import AccountingRecord

# Slurm's clock and the service's may differ a little, and accounting keeps whole seconds.
TOLERANCE = dt.timedelta(seconds=2)


def _starts(record: AccountingRecord) -> dt.datetime | None:
    """When the row's run began (its end when it never started, e.g. cancelled while pending)."""
    return record.start or record.end


def _sane(record: AccountingRecord) -> bool:
    """An ended row whose end is not before its start (an older run's end never makes a negative duration)."""
    if record.state not in states.ENDED or record.end is None:
        return False
    return record.start is None or record.end >= record.start


def attempt_record(
    history: Sequence[AccountingRecord] | None,
    *,
    started: dt.datetime | None,
    first_seen: dt.datetime,
) -> AccountingRecord | None:
    """The ended accounting row of one attempt, or None when no row lies in that attempt's own window.

    `started` is the attempt's start as Slurm reported it while it ran: the row must have started within
    TOLERANCE of it. An attempt never seen running was first seen pending at `first_seen`: its row is the
    earliest that began no earlier than that (a later attempt of the same job begins later still). Either way
    a row of an older submission that reused the job id began before this attempt existed and is never
    chosen, whatever its position in accounting.
    """
    rows = [record for record in history or () if _sane(record)]
    if started is not None:
        near = [r for r in rows if r.start is not None and abs(r.start - started) <= TOLERANCE]
        return min(near, key=lambda r: abs((r.start or started) - started), default=None)
    after = [r for r in rows if (begun := _starts(r)) is not None and begun >= first_seen - TOLERANCE]
    return min(after, key=lambda r: _starts(r) or first_seen, default=None)
