"""Job answers parsed incrementally (squeue --json and slurmrestd's bulk jobs): only new or changed records are decoded.

msgspec scans an answer once, keeping each job record as its raw bytes (msgspec.Raw, no Python objects for its
~100 fields); a record byte-for-byte the same as one of the previous answer gets the same SlurmJob object back
(parse_job is a pure function of the record), so an unchanged answer costs the scan and one comparison of bytes
per job (with the record at the same place last time; a dict by bytes once many records moved), its jobs compare
by identity and its index by job id is the previous one. A new or changed record is decoded into the fields
parse_job reads (JOB_FIELDS) only. Memory: the previous answer's record bytes (about its size) stay referenced
until the next answer replaces them.
"""

from __future__ import annotations

import gc
from datetime import UTC, datetime
from typing import Any

import msgspec

from app.slurm.parse import JOB_FIELDS, ParseError, answer_meta, load_json, parse_job, parse_snapshot
from app.slurm.records import SlurmJob, Snapshot


class _Answer(msgspec.Struct):
    """The top level of a squeue/slurmrestd jobs answer; each job record is kept as its raw bytes."""

    jobs: list[msgspec.Raw] | None = None
    errors: Any = None
    warnings: Any = None
    meta: Any = None


_ANSWER = msgspec.json.Decoder(_Answer)
# decoding only the fields parse_job reads skips the other ~100 of each record; absent ones are None
_RECORD = msgspec.json.Decoder(msgspec.defstruct("_JobFields", [(name, Any, None) for name in JOB_FIELDS]))
# records that differ from the one at their place last time decoded (at least; 5% of the previous answer)
# before the rest is looked up by bytes: a changed record costs a decode, a dict of every previous record
# only pays off once records moved
_DECODE_BEFORE_LOOKUP = 64


class _IncrementalJobs:
    """The memory of the previous answer's records and what they became, shared by both parsers below."""

    def __init__(self) -> None:
        # the previous answer's records (msgspec.Raw, compared by their bytes) and what they became
        self._raws: list[msgspec.Raw] = []
        self._jobs: list[SlurmJob | None] = []
        self._last: Snapshot | None = None
        self.decoded = 0  # records decoded (not reused) by the last parse, for tests and benches

    def _snapshot(
        self, records: list[msgspec.Raw], *, errors: Any, meta: Any, taken_at: datetime | None, duration: float
    ) -> Snapshot:
        """The Snapshot of one answer's raw records, as parse_snapshot makes it (same jobs, problems and errors)."""
        paused = gc.isenabled()
        if paused:
            gc.disable()  # as in app.slurm.parse.load_json: the decoded containers hold no cycles
        try:
            jobs, problems = self._jobs_of(records)
        finally:
            if paused:
                gc.enable()
        for error in errors or ():
            problems.append(f"slurm reported: {error}")
        release, parser = answer_meta({"meta": meta})
        ordered = tuple(jobs)
        last = self._last
        # every record unchanged and in the same order: the previous index by job id still holds
        by_id = last.by_id if last is not None and self.decoded == 0 and last.jobs == ordered else {}
        self._last = Snapshot(
            jobs=ordered,
            taken_at=taken_at or datetime.now(UTC),
            duration=duration,
            problems=tuple(problems),
            slurm_release=release,
            data_parser=parser,
            by_id=by_id,
        )
        return self._last

    def _jobs_of(self, records: list[msgspec.Raw]) -> tuple[list[SlurmJob], list[str]]:
        """The answer's jobs (reused or decoded) and the records that could not be read; remembered for next time."""
        previous_raws, previous_jobs = self._raws, self._jobs
        by_bytes: dict[bytes, SlurmJob | None] | None = None  # built only when records moved in the list
        jobs: list[SlurmJob] = []
        made: list[SlurmJob | None] = []
        problems: list[str] = []
        decoded = 0
        for index, record_raw in enumerate(records):
            # most records sit where they sat last time: one comparison of bytes, no hashing
            job = previous_jobs[index] if index < len(previous_raws) and record_raw == previous_raws[index] else None
            if job is None and previous_raws and decoded >= max(_DECODE_BEFORE_LOOKUP, len(previous_raws) // 20):
                # many records differ from their place last time: they moved, find them by their bytes
                if by_bytes is None:
                    by_bytes = {bytes(r): j for r, j in zip(previous_raws, previous_jobs, strict=True) if j is not None}
                job = by_bytes.get(bytes(record_raw))
            if job is None:  # new or changed (a record that failed before is tried again)
                decoded += 1
                record: Any = None
                try:
                    record = msgspec.structs.asdict(_RECORD.decode(record_raw))
                    job = parse_job(record)
                except Exception as exc:  # one odd record must never cost the whole tick
                    ident = record.get("job_id") if isinstance(record, dict) else None
                    problems.append(f"job record #{index} (job_id={ident!r}) skipped: {type(exc).__name__}: {exc}")
            made.append(job)
            if job is not None:
                jobs.append(job)
        self._raws, self._jobs, self.decoded = records, made, decoded
        return jobs, problems

    def _forget(self) -> None:
        """Drop the memory (an answer read another way: nothing of it can be reused next time)."""
        self._raws, self._jobs, self._last = [], [], None


class SnapshotParser(_IncrementalJobs):
    """parse_snapshot of successive `squeue --json` answers, decoding only the job records that changed."""

    def parse(self, raw: bytes | str, *, taken_at: datetime | None = None, duration: float = 0.0) -> Snapshot:
        """All jobs of one answer, like parse_snapshot (same jobs, problems and errors)."""
        try:
            answer = _ANSWER.decode(raw)
        except msgspec.ValidationError as exc:
            raise ParseError(f"not a squeue answer: {exc}") from None
        except (msgspec.DecodeError, UnicodeDecodeError) as exc:
            raise ParseError(f"not JSON: {exc}") from None
        if answer.jobs is None:
            raise ParseError("no `jobs` list in the answer")
        return self._snapshot(answer.jobs, errors=answer.errors, meta=answer.meta, taken_at=taken_at, duration=duration)


def decode_jobs_answer(raw: bytes) -> dict[str, Any]:
    """A slurmrestd jobs answer: errors, warnings, meta and the job records as raw bytes; ParseError if not JSON."""
    try:
        answer = _ANSWER.decode(raw)
    except msgspec.ValidationError:
        return load_json(raw)  # JSON of another shape (e.g. `jobs` not a list): the generic reading says why
    except msgspec.DecodeError as exc:
        raise ParseError(f"not JSON: {exc}") from None
    return {"jobs": answer.jobs, "errors": answer.errors, "warnings": answer.warnings, "meta": answer.meta}


class JobsParser(_IncrementalJobs):
    """Snapshots from successive bulk jobs answers of one slurmrestd (decode_jobs_answer), reusing unchanged records."""

    def parse(self, data: dict[str, Any], *, taken_at: datetime | None = None, duration: float = 0.0) -> Snapshot:
        """The Snapshot of one decoded answer; broken records are problems (see parse_snapshot)."""
        records = data.get("jobs")
        if not isinstance(records, list):
            raise ParseError("no `jobs` list in the answer")
        if records and not isinstance(records[0], msgspec.Raw):  # decoded generically: no reuse
            self._forget()
            self.decoded = len(records)
            return parse_snapshot(data, taken_at=taken_at, duration=duration)
        meta = data.get("meta")
        return self._snapshot(records, errors=data.get("errors"), meta=meta, taken_at=taken_at, duration=duration)
