"""The job's numeric uid/gid (whose rights its files are read with) from every squeue/slurmrestd shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.slurm.incremental import SnapshotParser
from app.slurm.parse import parse_job, parse_snapshot

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slurm"
REFERENCE = Path("/work/shared/reference/slurm-json")


def test_lab_captures_carry_the_uid_of_the_submitting_user() -> None:
    for name in ("squeue-v0.0.38-lab.json", "22.05/squeue.json", "26.05/squeue.json"):
        jobs = parse_snapshot((FIXTURES / name).read_bytes()).jobs
        assert jobs and all(job.user_id == 0 and job.group_id == 0 for job in jobs), name  # the lab submits as root


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="the shared reference captures are not on this machine")
def test_reference_listings_keep_each_jobs_own_uid() -> None:
    raw = json.loads((REFERENCE / "squeue-v0.0.42-slurminal.json").read_text())
    expected = {record["job_id"]: record["user_id"] for record in raw["jobs"]}
    parsed = {job.job_id: job.user_id for job in parse_snapshot(raw).jobs}
    assert parsed == expected and set(parsed.values()) == {10709}
    rest = json.loads((REFERENCE / "slurmrestd-jobs-v0.0.43-slurmweb.json").read_text())
    assert {job.user_id for job in parse_snapshot(rest).jobs} == {r["user_id"] for r in rest["jobs"]}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1001, 1001),
        ({"set": True, "infinite": False, "number": 1001}, 1001),
        ({"set": False, "infinite": False, "number": 0}, None),
        (None, None),
        (-1, None),
        (0xFFFFFFFE, None),  # NO_VAL
        ("1001", None),
        (True, None),
    ],
)
def test_odd_uid_values_are_no_uid(value: object, expected: int | None) -> None:
    job = parse_job({"job_id": 7, "job_state": "RUNNING", "user_id": value, "group_id": value})
    assert (job.user_id, job.group_id) == (expected, expected)


def test_the_incremental_decoder_keeps_the_uid() -> None:
    raw = (FIXTURES / "squeue-v0.0.38-lab.json").read_bytes()
    parser = SnapshotParser()
    first = parser.parse(raw)
    again = parser.parse(raw.replace(b'"user_id": 0', b'"user_id": 1234', 1))
    assert {job.user_id for job in first.jobs} == {0}
    assert 1234 in {job.user_id for job in again.jobs}
