"""Retry limit and early-stop rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.decision.retry import (
    AttemptRecord,
    FailureKind,
    early_stop_applies,
    effective_retry_limit,
    failures_without_progress,
    made_progress,
    retry_limit_reached,
)


@pytest.mark.parametrize(
    "site, job, limit",
    [(3, None, 3), (3, 1, 1), (3, 5, 3), (0, 2, 0), (3, 0, 0), (2, 2, 2)],
)
def test_effective_retry_limit(site: int, job: int | None, limit: int) -> None:
    result = effective_retry_limit(site_ceiling=site, job_max_requeue=job)
    assert result.limit == limit
    assert result.job_requested == job and result.site_ceiling == site


def test_describe_names_both_sources() -> None:
    assert (
        effective_retry_limit(site_ceiling=3, job_max_requeue=1).describe_reached()
        == "retry limit 1 reached (job asked 1, site ceiling 3)"
    )
    assert (
        effective_retry_limit(site_ceiling=3, job_max_requeue=None).describe()
        == "retry limit 3 (job asked nothing, site ceiling 3)"
    )


@pytest.mark.parametrize(
    "index, limit, reached", [(0, 1, False), (1, 1, True), (0, 0, True), (2, 3, False), (3, 3, True), (7, 3, True)]
)
def test_retry_limit_reached_counts_attempt_index_as_retries_used(index: int, limit: int, reached: bool) -> None:
    assert retry_limit_reached(effective_retry_limit(site_ceiling=10, job_max_requeue=limit), index) is reached


@given(st.integers(0, 50), st.one_of(st.none(), st.integers(0, 50)))
def test_effective_limit_never_exceeds_either_source(site: int, job: int | None) -> None:
    limit = effective_retry_limit(site_ceiling=site, job_max_requeue=job).limit
    assert limit <= site and (job is None or limit <= job)


def failed(index: int, saves: int = 0, iteration: int | None = None) -> AttemptRecord:
    return AttemptRecord(
        attempt_index=index,
        failed=True,
        failure_kind=FailureKind.CRASH,
        checkpoints_saved=saves,
        latest_checkpoint_iteration=iteration,
    )


@pytest.mark.parametrize(
    "saves, iteration, earlier, progress",
    [
        (0, None, [], False),
        (1, None, [], True),
        (1, 100, [], True),
        (2, 100, [failed(0, 1, 100)], False),  # re-saved the same iteration: no progress
        (1, 200, [failed(0, 1, 100)], True),
        (1, None, [failed(0, 1, 100)], True),  # iteration unknown: a save counts
        (1, 50, [failed(0, 0, 900)], True),  # an earlier iteration without a recorded save does not count
    ],
)
def test_made_progress(saves: int, iteration: int | None, earlier: list[AttemptRecord], progress: bool) -> None:
    assert made_progress(checkpoints_saved=saves, latest_checkpoint_iteration=iteration, earlier=earlier) is progress


@pytest.mark.parametrize(
    "history, saves, count",
    [
        ([], 0, 1),
        ([], 1, 0),
        ([failed(0)], 0, 2),
        ([failed(0), failed(1)], 0, 3),
        ([failed(0), failed(1, saves=1)], 0, 1),  # attempt 1 saved: the row starts after it
        ([failed(0), AttemptRecord(1, failed=False)], 0, 1),  # a non-failure ends the row
        ([failed(0, 1, 10), failed(1, 1, 10), failed(2)], 0, 3),  # attempt 1 only re-saved iteration 10
        ([failed(1), failed(0)], 0, 3),  # order of the input does not matter
    ],
)
def test_failures_without_progress(history: list[AttemptRecord], saves: int, count: int) -> None:
    assert (
        failures_without_progress(history=history, checkpoints_saved=saves, latest_checkpoint_iteration=None) == count
    )


@pytest.mark.parametrize(
    "streak, n, applies", [(3, 3, True), (2, 3, False), (5, 3, True), (9, 0, False), (1, 1, True), (0, 1, False)]
)
def test_early_stop_applies(streak: int, n: int, applies: bool) -> None:
    assert early_stop_applies(failures_in_a_row=streak, early_stop_failures=n) is applies
