"""What a pushed stream's labels say (cluster, job, attempt, node, file) and which time each pushed line is given."""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from dataclasses import dataclass

from app.domain.detection.line_facts import parse_timestamp
from app.infra.config import Settings
from app.ingest.wire import OBSERVED, SOURCE, Entry

LINE_TIME = "line"  # the time written in the line itself (the record's own was missing)
REWRITTEN = "rewritten"  # the record's time was replaced by ingestion time: the line's own time is used
UNTIMED = "none"

_JOB_ID = re.compile(r"\d{1,18}")  # Slurm job ids; an array task's `1234_7` names its own id in SLURM_JOB_ID
_ATTEMPT = re.compile(r"\d{1,6}")


@dataclass(frozen=True)
class StreamTarget:
    """Where a stream's lines belong, as its labels say (None: the label is absent or unusable)."""

    cluster: str
    slurm_job_id: int | None
    attempt: int | None
    node: str | None
    filename: str | None


def first_label(labels: dict[str, str], names: tuple[str, ...]) -> str | None:
    """The value of the first of `names` the labels carry (sites name the same thing differently)."""
    for name in names:
        value = labels.get(name)
        if value:
            return value
    return None


def target_of(labels: dict[str, str], settings: Settings) -> StreamTarget:
    """The cluster, job, attempt, node and file a stream's labels name (the names are settings)."""
    job = first_label(labels, settings.push_label_job)
    attempt = first_label(labels, settings.push_label_attempt)
    return StreamTarget(
        cluster=first_label(labels, settings.push_label_cluster) or settings.cluster,
        slurm_job_id=int(job) if job is not None and _JOB_ID.fullmatch(job.strip()) else None,
        attempt=int(attempt) if attempt is not None and _ATTEMPT.fullmatch(attempt.strip()) else None,
        node=first_label(labels, settings.push_label_node),
        filename=first_label(labels, settings.push_label_filename),
    )


def stream_key(collector: str, labels: dict[str, str]) -> str:
    """The identity of a stream across pushes: the collector and its sorted label set."""
    text = "\0".join([collector, *(f"{k}\1{v}" for k, v in sorted(labels.items()))])
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def line_key(stream: str, entry: Entry) -> str:
    """A pushed line's identity: its stream, its time as pushed and its text (a replay has the same key)."""
    digest = hashlib.sha256(f"{stream}\0{entry.time_ns}\0".encode())
    digest.update(entry.line.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:32]


@dataclass(frozen=True)
class LineTime:
    """The time a pushed line is attributed by (None: none trustworthy) and where it came from."""

    at: dt.datetime | None
    kind: str


def line_time(entry: Entry, *, received: dt.datetime, settings: Settings) -> LineTime:
    """The record's own time; the line's written time when the record's is missing or was rewritten to ingestion.

    An OTLP observed time is when the collector read the line, not when it was written: it decides nothing
    unless `push_trust_observed_time` is on (the guide: never attribute a line to a newer retry by default).
    A record time within `push_rewritten_window` of its arrival while the line itself says it was written
    earlier than that window is ingestion time stamped on an old line (a replayed file): the line's time wins.
    """
    written = parse_timestamp(entry.line[:200], now=received, default_tz=dt.UTC) if entry.line else None
    if entry.time_kind == SOURCE:
        at = dt.datetime.fromtimestamp(entry.time_ns / 1e9, dt.UTC)
        window = dt.timedelta(seconds=settings.push_rewritten_window)
        if written is not None and abs(received - at) <= window and at - written > window:
            return LineTime(written, REWRITTEN)
        return LineTime(at, SOURCE)
    if written is not None:
        return LineTime(written, LINE_TIME)
    if entry.time_kind == OBSERVED:
        at = dt.datetime.fromtimestamp(entry.time_ns / 1e9, dt.UTC)
        return LineTime(at if settings.push_trust_observed_time else None, OBSERVED)
    return LineTime(None, UNTIMED)
