"""Attempt UUIDs, attempt references and Slurm job-id reuse detection."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.control.identity import (
    ATTEMPT_NAMESPACE,
    MAX_SLURM_JOB_ID,
    AttemptRef,
    SubmissionFingerprint,
    attempt_uuid,
    format_attempt_ref,
    is_job_id_reused,
    job_id_reuse_reason,
    parse_attempt_ref,
)

T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)


def test_attempt_uuid_is_uuid5_of_cluster_job_attempt() -> None:
    expected = str(uuid.uuid5(ATTEMPT_NAMESPACE, "lab/12345/0"))
    assert attempt_uuid("lab", 12345, 0) == expected
    assert uuid.UUID(expected).version == 5


def test_attempt_uuid_differs_by_each_part() -> None:
    ids = {attempt_uuid("lab", 1, 0), attempt_uuid("lab", 1, 1), attempt_uuid("lab", 2, 0), attempt_uuid("other", 1, 0)}
    assert len(ids) == 4


def test_attempt_uuid_does_not_confuse_boundaries() -> None:
    # "a/1" + "2" vs "a" + "12": the separator keeps these apart.
    assert attempt_uuid("a", 12, 3) != attempt_uuid("a", 1, 23)


@pytest.mark.parametrize("job_id, index", [(0, 0), (-1, 0), (1, -1), (MAX_SLURM_JOB_ID + 1, 0), (True, 0), (1, 2**31)])
def test_attempt_uuid_rejects_out_of_range(job_id: int, index: int) -> None:
    with pytest.raises(ValueError):
        attempt_uuid("lab", job_id, index)


def test_attempt_uuid_needs_a_cluster() -> None:
    with pytest.raises(ValueError):
        attempt_uuid("", 1, 0)


@given(st.text(min_size=1, max_size=20), st.integers(1, MAX_SLURM_JOB_ID), st.integers(0, 10_000))
def test_attempt_uuid_is_deterministic(cluster: str, job_id: int, index: int) -> None:
    assert attempt_uuid(cluster, job_id, index) == attempt_uuid(cluster, job_id, index)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("12345-0", AttemptRef("index", 12345, 0)),
        ("12345/3", AttemptRef("index", 12345, 3)),
        ("  7-1 ", AttemptRef("index", 7, 1)),
        ("4294967295-0", AttemptRef("index", MAX_SLURM_JOB_ID, 0)),
    ],
)
def test_parse_index_refs(text: str, expected: AttemptRef) -> None:
    assert parse_attempt_ref(text) == expected


def test_parse_uuid_ref_normalises_case() -> None:
    value = attempt_uuid("lab", 5, 0)
    assert parse_attempt_ref(value.upper()) == AttemptRef("uuid", uuid=value)
    assert parse_attempt_ref(value) == AttemptRef("uuid", uuid=value)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "12345",
        "12345-",
        "-12345-0",
        "12345--1",
        "12345-+1",
        "+1-0",
        "0-0",
        "12345-0-1",
        "a-0",
        "12345-x",
        "1 2-0",
        "4294967296-0",
        "1-2147483648",
        "١٢-0",
        "12345_0",
        "12345:0",
        "{" + str(uuid.UUID(int=1)) + "}",
        "urn:uuid:" + str(uuid.UUID(int=1)),
        uuid.UUID(int=1).hex,
        "not-a-uuid-at-all-0000000000000000000",
    ],
)
def test_parse_rejects_garbage(text: str) -> None:
    assert parse_attempt_ref(text) is None


def test_parse_rejects_non_strings() -> None:
    assert parse_attempt_ref(None) is None  # type: ignore[arg-type]
    assert parse_attempt_ref(12345) is None  # type: ignore[arg-type]


@given(st.integers(1, MAX_SLURM_JOB_ID), st.integers(0, 2**31 - 1))
def test_format_and_parse_round_trip(job_id: int, index: int) -> None:
    assert parse_attempt_ref(format_attempt_ref(job_id, index)) == AttemptRef("index", job_id, index)


@given(st.text(max_size=40))
def test_parse_never_raises(text: str) -> None:
    ref = parse_attempt_ref(text)
    assert ref is None or ref.kind in {"index", "uuid"}


def fp(
    submit: dt.datetime | None = T0, name: str | None = "train", comment: str | None = '{"APS":{}}', restarts: int = 0
) -> SubmissionFingerprint:
    return SubmissionFingerprint(submit_time=submit, name=name, comment=comment, restart_count=restarts)


LATER = T0 + dt.timedelta(minutes=5)
EARLIER = T0 - dt.timedelta(minutes=5)


@pytest.mark.parametrize(
    "stored, observed, reused, why",
    [
        (fp(), fp(), False, "identical"),
        (fp(), fp(restarts=1, submit=LATER), False, "a requeue resets the submit time and bumps the count"),
        (fp(restarts=1), fp(restarts=1, submit=LATER), False, "submit time reset lands after the count bump"),
        (fp(restarts=2), fp(restarts=3), False, "requeue seen before the submit time reset"),
        (fp(), fp(submit=LATER), True, "never requeued yet the submit time moved"),
        (fp(restarts=1), fp(restarts=1, submit=EARLIER), True, "submit time never moves back"),
        (fp(restarts=2), fp(restarts=0, submit=LATER), True, "restart count went back"),
        (fp(restarts=2), fp(restarts=1), True, "restart count went back, same submit time"),
        (fp(), fp(name="other"), True, "name differs"),
        (fp(restarts=1), fp(restarts=2, submit=LATER, name="other"), True, "name differs even across a requeue"),
        (fp(), fp(comment='{"APS":{"x":1}}'), True, "comment differs"),
        (fp(), fp(comment=""), False, "sacct without job_comment shows no comment"),
        (fp(), fp(comment=None, name=None, submit=None), False, "nothing known to compare"),
        (fp(submit=None), fp(submit=LATER), False, "stored submit time unknown"),
    ],
)
def test_job_id_reuse(stored: SubmissionFingerprint, observed: SubmissionFingerprint, reused: bool, why: str) -> None:
    assert is_job_id_reused(stored, observed) is reused, why
    reason = job_id_reuse_reason(stored, observed)
    assert (reason is not None) is reused
    if reason:
        assert reason[0].islower() and len(reason) > 10
