"""The advisor stops retrying an application failure that repeats at the same place (application_failure_repeated)."""

from __future__ import annotations

import datetime as dt

from app.domain.decision.advice import Failure, JobPolicy, Operation, SitePolicy, decide
from app.domain.decision.retry import AttemptRecord, FailureKind

NOW = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
SIG = "PYTHON_TRACEBACK: ValueError: batch 5 has shape (7, 3), expected (8, 3)"


def failure(**kw) -> Failure:
    values = dict(attempt_index=1, kind=FailureKind.CRASH, category="PYTHON_TRACEBACK", outlook="application")
    values.update(signature=SIG, iteration=5)
    values.update(kw)
    return Failure(**values)  # type: ignore[arg-type]


def earlier(**kw) -> AttemptRecord:
    values = dict(attempt_index=0, failed=True, failure_outlook="application", failure_signature=SIG)
    values.update(failure_iteration=5)
    values.update(kw)
    return AttemptRecord(**values)  # type: ignore[arg-type]


def run(f: Failure, history: list[AttemptRecord], site: SitePolicy | None = None):
    return decide(
        failure=f,
        policy=JobPolicy(max_requeue_times=5),
        site=site or SitePolicy(max_requeue=5),
        history=history,
        now=NOW,
    )


def test_same_exception_at_the_same_iteration_terminates_naming_the_rule():
    decision = run(failure(iteration=7), [earlier()])
    assert (decision.operation, decision.rule) == (Operation.TERMINATE, "application_failure_repeated")
    assert "the same application failure as attempt 0" in decision.reason
    assert "ValueError: batch 5" in decision.reason and "at iteration 7" in decision.reason
    assert "RECOVERY_STOP_REPEATED_APPLICATION_FAILURES" in decision.reason


def test_the_operator_setting_turns_the_rule_off():
    decision = run(failure(), [earlier()], SitePolicy(max_requeue=5, stop_repeated_application_failures=False))
    assert (decision.operation, decision.rule) == (Operation.RESTART, "restart_allowed")


def test_a_different_place_or_message_or_outlook_is_retried():
    assert run(failure(iteration=50), [earlier()]).operation is Operation.RESTART  # it got further this time
    assert run(failure(signature=SIG + "!"), [earlier()]).operation is Operation.RESTART
    assert run(failure(outlook="infrastructure"), [earlier()]).operation is Operation.RESTART
    assert run(failure(), [earlier(failure_outlook="transient")]).operation is Operation.RESTART
    assert run(failure(attempt_index=0), []).operation is Operation.RESTART  # the first failure is retried once


def test_start_up_errors_without_progress_repeat_too():
    decision = run(failure(iteration=None), [earlier(failure_iteration=None)])
    assert decision.rule == "application_failure_repeated" and "no iteration read" in decision.reason


def test_an_unknown_iteration_on_one_side_leaves_the_fingerprint_to_decide():
    """A resumed attempt that failed before printing a second step counter has no iteration: the same fingerprint
    is the same failure (its earlier attempt's iteration is no evidence of another place)."""
    assert run(failure(iteration=None), [earlier()]).rule == "application_failure_repeated"
    assert run(failure(), [earlier(failure_iteration=None)]).rule == "application_failure_repeated"
    assert run(failure(iteration=None, signature=SIG + "!"), [earlier()]).operation is Operation.RESTART


def test_a_scheduler_failure_carrying_the_root_cause_is_stopped_as_well():
    f = failure(kind=FailureKind.SCHEDULER_FAILURE, state="FAILED", exit_code=1)
    decision = run(f, [earlier()])
    assert decision.rule == "application_failure_repeated"
    assert decision.reason.startswith("attempt 1 ended FAILED, exit code 1, root cause PYTHON_TRACEBACK (application)")
