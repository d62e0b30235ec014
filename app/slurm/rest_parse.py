"""slurmrestd's bulk jobs answer, parsed incrementally: a job record byte-identical to one of the previous answer
keeps the SlurmJob parsed then; only new or changed records are decoded and parsed.

`GET /slurm/vX/jobs` of 10,000 jobs is ~26 MB. json.loads of it builds every field of every record (about 100 per
record, most of which Recovery never reads) before app.slurm.parse picks 30 of them. Here msgspec scans the answer
once, keeping each record as its raw bytes (msgspec.Raw, no Python objects built for its fields); a record whose
bytes equal one of the previous answer's maps to the same SlurmJob (parse_job is a pure function of the record), so
an unchanged tick costs the scan and one dict look-up per job. Memory: the previous answer's record bytes (about the
answer's size) stay referenced until the next answer replaces them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec

from app.slurm.parse import ParseError, answer_meta, load_json, parse_job, parse_snapshot
from app.slurm.records import SlurmJob, Snapshot


class _JobsAnswer(msgspec.Struct):
    """The fields of a bulk jobs answer the adapter reads; every other field is skipped unparsed."""

    jobs: list[msgspec.Raw] | None = None
    errors: Any = None
    warnings: Any = None
    meta: Any = None


_ANSWER = msgspec.json.Decoder(_JobsAnswer)
_RECORD = msgspec.json.Decoder()


def decode_jobs_answer(raw: bytes) -> dict[str, Any]:
    """The answer's errors, meta and its job records as raw bytes; ParseError when it is not a JSON object."""
    try:
        answer = _ANSWER.decode(raw)
    except msgspec.ValidationError:
        return load_json(raw)  # JSON of another shape (e.g. `jobs` not a list): the generic reading says why
    except msgspec.DecodeError as exc:
        raise ParseError(f"not JSON: {exc}") from None
    return {"jobs": answer.jobs, "errors": answer.errors, "warnings": answer.warnings, "meta": answer.meta}


class JobsParser:
    """Snapshots from successive bulk jobs answers of one slurmrestd, reusing the records that did not change."""

    def __init__(self) -> None:
        self._previous: dict[bytes, SlurmJob] = {}
        self._last: Snapshot | None = None
        self.parsed = 0  # records parsed (not reused) by the last call, for tests and benches

    def parse(self, data: dict[str, Any], *, taken_at: datetime | None = None, duration: float = 0.0) -> Snapshot:
        """The Snapshot of one decoded answer (decode_jobs_answer); broken records are problems (see parse_snapshot)."""
        records = data.get("jobs")
        if not isinstance(records, list):
            raise ParseError("no `jobs` list in the answer")
        if records and not isinstance(records[0], msgspec.Raw):  # decoded generically: no reuse
            self._previous, self._last = {}, None
            snapshot = parse_snapshot(data, taken_at=taken_at, duration=duration)
            self.parsed = len(records)
            return snapshot
        previous = self._previous
        current: dict[bytes, SlurmJob] = {}
        jobs: list[SlurmJob] = []
        problems: list[str] = []
        parsed = 0
        for index, item in enumerate(records):
            key = bytes(item)
            job = previous.get(key)
            if job is None:
                parsed += 1
                record: Any = None
                try:
                    record = _RECORD.decode(key)
                    job = parse_job(record)
                except Exception as exc:  # one odd record must never cost the whole tick
                    ident = record.get("job_id") if isinstance(record, dict) else None
                    problems.append(f"job record #{index} (job_id={ident!r}) skipped: {type(exc).__name__}: {exc}")
                    continue
            current[key] = job
            jobs.append(job)
        for error in data.get("errors") or ():
            problems.append(f"slurm reported: {error}")
        release, parser = answer_meta(data)
        ordered = tuple(jobs)
        last = self._last
        # every record unchanged and in the same order: the previous index by job id still holds
        by_id = last.by_id if last is not None and parsed == 0 and last.jobs == ordered else {}
        snapshot = Snapshot(
            jobs=ordered,
            taken_at=taken_at or datetime.now(UTC),
            duration=duration,
            problems=tuple(problems),
            slurm_release=release,
            data_parser=parser,
            by_id=by_id,
        )
        self._previous, self._last, self.parsed = current, snapshot, parsed
        return snapshot
