"""The advisor's decision rules, exclusions, and the merge of several signals into one Advice."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.decision.advice import (
    Decision,
    Failure,
    JobPolicy,
    Operation,
    SitePolicy,
    accumulate_exclusions,
    advice_changed,
    advice_record,
    decide,
    merge_signals,
)
from app.domain.decision.retry import AttemptRecord, FailureKind

NOW = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
SITE = SitePolicy(max_requeue=3, early_stop_failures=3, straggler_enabled=False, advice_ttl=3600)
REQUEUE = JobPolicy(max_requeue_times=None, requeue_eligible=True)

CRASH = FailureKind.CRASH
SCHED = FailureKind.SCHEDULER_FAILURE
HANG = FailureKind.NO_PROGRESS
SLOW = FailureKind.SLOWDOWN


def fail(index: int = 0, kind: FailureKind = CRASH, **kw: Any) -> Failure:
    if kind is SCHED:
        kw.setdefault("state", "FAILED")
        kw.setdefault("exit_code", 1)
    if kind is CRASH:
        kw.setdefault("category", "segfault")
    kw.setdefault("checkpoints_saved", 1)
    return Failure(attempt_index=index, kind=kind, **kw)


def past(
    index: int, saves: int = 1, nodes: tuple[str, ...] = (), excl: tuple[str, ...] = (), ok: bool = True
) -> AttemptRecord:
    return AttemptRecord(
        index,
        failed=ok,
        failure_kind=CRASH if ok else None,
        checkpoints_saved=saves,
        implicated_nodes=nodes,
        advice_exclusions=excl,
    )


def run(
    failure: Failure,
    policy: JobPolicy = REQUEUE,
    site: SitePolicy = SITE,
    history: tuple[AttemptRecord, ...] = (),
    partition: tuple[str, ...] | None = None,
) -> Decision:
    return decide(failure=failure, policy=policy, site=site, history=history, partition_nodes=partition, now=NOW)


# ---- the rule table: (case, failure, policy, site, history, operation, rule, words in the reason) ----
CASES = [
    (
        "first failure restarts",
        fail(0),
        REQUEUE,
        SITE,
        (),
        "RESTART",
        "restart_allowed",
        ["attempt 0 crashed (segfault)", "restart as attempt 1"],
    ),
    (
        "limit 1, attempt 0",
        fail(0),
        JobPolicy(1, requeue_eligible=True),
        SITE,
        (),
        "RESTART",
        "restart_allowed",
        ["retry 1 of retry limit 1"],
    ),
    (
        "limit 1, attempt 1",
        fail(1),
        JobPolicy(1, requeue_eligible=True),
        SITE,
        (past(0),),
        "TERMINATE",
        "retry_limit",
        ["retry limit 1 reached (job asked 1, site ceiling 3)"],
    ),
    (
        "site ceiling lower than job",
        fail(2),
        JobPolicy(5, requeue_eligible=True),
        SitePolicy(max_requeue=2),
        (past(0), past(1)),
        "TERMINATE",
        "retry_limit",
        ["retry limit 2 reached (job asked 5, site ceiling 2)"],
    ),
    (
        "no job limit: site ceiling",
        fail(3),
        REQUEUE,
        SITE,
        (past(0), past(1), past(2)),
        "TERMINATE",
        "retry_limit",
        ["job asked nothing, site ceiling 3"],
    ),
    (
        "max_requeue_times 0",
        fail(0),
        JobPolicy(0, requeue_eligible=True),
        SITE,
        (),
        "TERMINATE",
        "retry_limit",
        ["retry limit 0 reached"],
    ),
    (
        "scheduler FAILED",
        fail(0, SCHED),
        REQUEUE,
        SITE,
        (),
        "RESTART",
        "restart_allowed",
        ["ended FAILED, exit code 1"],
    ),
    (
        "NODE_FAIL",
        fail(0, SCHED, state="NODE_FAIL", exit_code=None),
        REQUEUE,
        SITE,
        (),
        "RESTART",
        "restart_allowed",
        ["NODE_FAIL"],
    ),
    ("TIMEOUT", fail(0, SCHED, state="TIMEOUT"), REQUEUE, SITE, (), "RESTART", "restart_allowed", ["TIMEOUT"]),
    (
        "OUT_OF_MEMORY",
        fail(0, SCHED, state="OUT_OF_MEMORY"),
        REQUEUE,
        SITE,
        (),
        "RESTART",
        "restart_allowed",
        ["OUT_OF_MEMORY"],
    ),
    (
        "completed",
        fail(0, SCHED, state="COMPLETED", exit_code=0),
        REQUEUE,
        SITE,
        (),
        "NONE",
        "job_completed",
        ["completed successfully"],
    ),
    (
        "cancelled by a person",
        fail(0, SCHED, state="CANCELLED", exit_code=0),
        REQUEUE,
        SITE,
        (),
        "NONE",
        "job_cancelled",
        ["cancellation"],
    ),
    (
        "preempted is not a failure",
        fail(0, SCHED, state="PREEMPTED"),
        REQUEUE,
        SITE,
        (),
        "NONE",
        "not_a_failure",
        ["PREEMPTED"],
    ),
    (
        "hang restarts",
        fail(0, HANG, attempt_running=True),
        REQUEUE,
        SITE,
        (),
        "RESTART",
        "restart_allowed",
        ["stopped making progress"],
    ),
    (
        "slowdown, both off",
        fail(0, SLOW),
        JobPolicy(requeue_eligible=True),
        SITE,
        (),
        "NONE",
        "slowdown_not_allowed",
        ["operator's straggler switch and the job's straggler_detection_enabled"],
    ),
    (
        "slowdown, job off",
        fail(0, SLOW),
        JobPolicy(requeue_eligible=True),
        SitePolicy(straggler_enabled=True),
        (),
        "NONE",
        "slowdown_not_allowed",
        ["the job's straggler_detection_enabled is off"],
    ),
    (
        "slowdown, site off",
        fail(0, SLOW),
        JobPolicy(straggler_detection_enabled=True, requeue_eligible=True),
        SITE,
        (),
        "NONE",
        "slowdown_not_allowed",
        ["the operator's straggler switch is off"],
    ),
    (
        "slowdown, both on",
        fail(0, SLOW, attempt_running=True),
        JobPolicy(straggler_detection_enabled=True, requeue_eligible=True),
        SitePolicy(straggler_enabled=True),
        (),
        "RESTART",
        "restart_allowed",
        ["slowed down"],
    ),
    (
        "slowdown at the limit keeps running",
        fail(1, SLOW, attempt_running=True),
        JobPolicy(1, straggler_detection_enabled=True, requeue_eligible=True),
        SitePolicy(straggler_enabled=True),
        (past(0),),
        "NONE",
        "retry_limit",
        ["keeps running"],
    ),
    (
        "no-requeue crash while running",
        fail(0, attempt_running=True),
        JobPolicy(requeue_eligible=False),
        SITE,
        (),
        "TERMINATE",
        "requeue_not_possible",
        ["--no-requeue", "cancelled"],
    ),
    (
        "no-requeue hang while running",
        fail(0, HANG, attempt_running=True),
        JobPolicy(requeue_eligible=False),
        SITE,
        (),
        "TERMINATE",
        "requeue_not_possible",
        ["cancelled"],
    ),
    (
        "no-requeue ended",
        fail(0, SCHED),
        JobPolicy(requeue_eligible=False),
        SITE,
        (),
        "NONE",
        "requeue_not_possible",
        ["has ended"],
    ),
    (
        "no-requeue slowdown",
        fail(0, SLOW, attempt_running=True),
        JobPolicy(straggler_detection_enabled=True, requeue_eligible=False),
        SitePolicy(straggler_enabled=True),
        (),
        "NONE",
        "requeue_not_possible",
        ["keeps running"],
    ),
    (
        "requeue flag unknown: try",
        fail(0),
        JobPolicy(requeue_eligible=None),
        SITE,
        (),
        "RESTART",
        "restart_allowed",
        [],
    ),
    (
        "singleton_dependency",
        fail(0),
        JobPolicy(auto_resume_mode="singleton_dependency", requeue_eligible=False),
        SITE,
        (),
        "RESTART",
        "release_singleton_twin",
        ["release its held twin (same name, --dependency=singleton) as retry 1"],
    ),
    (
        "early stop after 3 without checkpoint",
        fail(2, checkpoints_saved=0),
        REQUEUE,
        SITE,
        (past(0, 0), past(1, 0)),
        "TERMINATE",
        "early_stop_no_checkpoint",
        ["3 failures in a row without a new checkpoint"],
    ),
    (
        "early stop: checkpoint resets",
        fail(2, checkpoints_saved=0),
        REQUEUE,
        SITE,
        (past(0, 0), past(1, 1)),
        "RESTART",
        "restart_allowed",
        [],
    ),
    (
        "early stop: current checkpoint counts",
        fail(2, checkpoints_saved=2),
        REQUEUE,
        SITE,
        (past(0, 0), past(1, 0)),
        "RESTART",
        "restart_allowed",
        [],
    ),
    (
        "early stop disabled",
        fail(2, checkpoints_saved=0),
        REQUEUE,
        SitePolicy(early_stop_failures=0),
        (past(0, 0), past(1, 0)),
        "RESTART",
        "restart_allowed",
        [],
    ),
    (
        "early stop N=1",
        fail(0, checkpoints_saved=0),
        REQUEUE,
        SitePolicy(early_stop_failures=1),
        (),
        "TERMINATE",
        "early_stop_no_checkpoint",
        ["1 failure in a row"],
    ),
    (
        "early stop: a person's requeue breaks the row",
        fail(2, checkpoints_saved=0),
        REQUEUE,
        SITE,
        (past(0, 0), past(1, 0, ok=False)),
        "RESTART",
        "restart_allowed",
        [],
    ),
    (
        "retry limit wins over early stop",
        fail(3, checkpoints_saved=0),
        REQUEUE,
        SITE,
        (past(0, 0), past(1, 0), past(2, 0)),
        "TERMINATE",
        "retry_limit",
        [],
    ),
]


@pytest.mark.parametrize(
    "case, failure, policy, site, history, operation, rule, words", CASES, ids=[c[0] for c in CASES]
)
def test_rules(
    case: str,
    failure: Failure,
    policy: JobPolicy,
    site: SitePolicy,
    history: tuple[AttemptRecord, ...],
    operation: str,
    rule: str,
    words: list[str],
) -> None:
    decision = run(failure, policy, site, history)
    assert decision.operation == Operation(operation), decision.reason
    assert decision.rule == rule
    for word in words:
        assert word in decision.reason, (word, decision.reason)
    assert decision.reason.endswith(".")


def test_expiry_follows_ttl() -> None:
    assert run(fail(0)).expires_at == NOW + dt.timedelta(hours=1)
    assert run(fail(0), site=SitePolicy(advice_ttl=0)).expires_at is None


# ---- exclusions ----
def test_exclusions_from_evidence_accumulate_over_attempts_and_advice() -> None:
    history = (past(0, nodes=("gpu07",)), past(1, excl=("gpu02",)))
    decision = run(fail(2, implicated_nodes=("gpu11", " gpu07 ", "")), history=history)
    assert decision.exclusions == ("gpu02", "gpu07", "gpu11")
    assert "excluding gpu02, gpu07, gpu11" in decision.reason


def test_exclusions_never_cover_the_whole_partition() -> None:
    history = (past(0, nodes=("n1",)),)
    decision = run(fail(1, implicated_nodes=("n2",)), history=history, partition=("n1", "n2"))
    assert decision.exclusions == ("n2",)
    assert "only the newest evidence's nodes (n2)" in decision.reason


def test_exclusions_dropped_when_newest_alone_covers_partition() -> None:
    decision = run(fail(0, implicated_nodes=("n1",)), partition=("n1",))
    assert decision.exclusions == ()
    assert "no node is excluded" in decision.reason


def test_exclusions_outside_the_partition_do_not_trigger_the_guard() -> None:
    exclusions, note = accumulate_exclusions(
        failure=fail(1, implicated_nodes=("x9",)), history=(past(0, nodes=("n1",)),), partition_nodes=("n1", "n2")
    )
    assert exclusions == ("n1", "x9") and note is None


def test_history_after_the_failed_attempt_is_ignored() -> None:
    decision = run(fail(0, implicated_nodes=("a",)), history=(past(3, nodes=("z",)),))
    assert decision.exclusions == ("a",)


node_names = st.sets(st.sampled_from([f"n{i}" for i in range(12)]), max_size=4)


@given(st.lists(node_names, min_size=1, max_size=6))
def test_exclusions_are_monotonic_over_attempts(per_attempt: list[set[str]]) -> None:
    history: list[AttemptRecord] = []
    previous: tuple[str, ...] = ()
    for index, nodes in enumerate(per_attempt):
        decision = decide(
            failure=fail(index, implicated_nodes=tuple(nodes)),
            policy=JobPolicy(50, requeue_eligible=True),
            site=SitePolicy(max_requeue=50, early_stop_failures=0),
            history=tuple(history),
            now=NOW,
        )
        assert set(previous) <= set(decision.exclusions)
        assert list(decision.exclusions) == sorted(decision.exclusions)
        history.append(
            AttemptRecord(
                index,
                failed=True,
                failure_kind=CRASH,
                implicated_nodes=tuple(nodes),
                advice_exclusions=decision.exclusions,
            )
        )
        previous = decision.exclusions


failures = st.builds(
    Failure,
    attempt_index=st.integers(0, 6),
    kind=st.sampled_from(list(FailureKind)),
    state=st.sampled_from([None, "FAILED", "COMPLETED", "CANCELLED", "NODE_FAIL", "TIMEOUT", "PREEMPTED"]),
    exit_code=st.one_of(st.none(), st.integers(0, 255)),
    implicated_nodes=st.tuples(st.sampled_from(["n1", "n2", "n3"])),
    attempt_running=st.booleans(),
    checkpoints_saved=st.integers(0, 2),
)
policies = st.builds(
    JobPolicy,
    max_requeue_times=st.one_of(st.none(), st.integers(0, 5)),
    straggler_detection_enabled=st.booleans(),
    requeue_eligible=st.one_of(st.none(), st.booleans()),
)
sites = st.builds(
    SitePolicy, max_requeue=st.integers(0, 5), early_stop_failures=st.integers(0, 4), straggler_enabled=st.booleans()
)


@given(failures, policies, sites, st.lists(st.integers(0, 2), max_size=6))
def test_decision_is_deterministic_and_well_formed(
    failure: Failure, policy: JobPolicy, site: SitePolicy, saves: list[int]
) -> None:
    history = tuple(AttemptRecord(i, failed=True, failure_kind=CRASH, checkpoints_saved=s) for i, s in enumerate(saves))
    first = decide(
        failure=failure, policy=policy, site=site, history=history, partition_nodes=("n1", "n2", "n3"), now=NOW
    )
    second = decide(
        failure=failure,
        policy=policy,
        site=site,
        history=tuple(reversed(history)),
        partition_nodes=("n3", "n2", "n1"),
        now=NOW,
    )
    assert first == second
    assert first.reason and first.rule
    assert set(first.exclusions) != {"n1", "n2", "n3"}
    if first.operation is Operation.RESTART:
        assert policy.requeue_eligible is not False
        assert failure.attempt_index < min(
            site.max_requeue, policy.max_requeue_times if policy.max_requeue_times is not None else site.max_requeue
        )
    if failure.kind is FailureKind.SLOWDOWN:
        assert first.operation is not Operation.TERMINATE  # a slow run is never killed


# ---- one failure, one Advice ----
def test_crash_line_then_failed_state_keeps_the_same_decision() -> None:
    crash = run(fail(0, attempt_running=True, implicated_nodes=("n1",)))
    state = run(fail(0, SCHED, implicated_nodes=()))
    merged = merge_signals(crash, state)
    assert merged is crash
    assert not advice_changed(crash, merged)


def test_new_exclusions_from_a_later_signal_change_the_advice() -> None:
    crash = run(fail(0, attempt_running=True))
    xid = run(fail(0, CRASH, category="xid", implicated_nodes=("gpu3",)))
    merged = merge_signals(crash, xid)
    assert merged.exclusions == ("gpu3",)
    assert advice_changed(crash, merged)


def test_merge_never_drops_exclusions() -> None:
    first = run(fail(0, implicated_nodes=("a",)))
    second = run(fail(0, implicated_nodes=("b",)))
    assert merge_signals(first, second).exclusions == ("a", "b")


def test_merge_respects_the_partition_guard() -> None:
    first = run(fail(0, implicated_nodes=("a",)))
    second = run(fail(0, implicated_nodes=("b",)))
    merged = merge_signals(first, second, partition_nodes=("a", "b"))
    assert merged.exclusions == ("b",)
    assert "would leave no node" in merged.reason


def test_none_verdict_never_withdraws_advice() -> None:
    cancel = run(fail(0, attempt_running=True), JobPolicy(requeue_eligible=False))
    ended = run(fail(0, SCHED), JobPolicy(requeue_eligible=False))
    assert ended.operation is Operation.NONE
    assert merge_signals(cancel, ended) is cancel


def test_clean_completion_turns_restart_into_terminate() -> None:
    restart = run(fail(0, attempt_running=True))
    completed = run(fail(0, SCHED, state="COMPLETED", exit_code=0))
    merged = merge_signals(restart, completed)
    assert merged.operation is Operation.TERMINATE and merged.rule == "job_completed"
    assert advice_changed(restart, merged)


def test_late_checkpoint_lifts_an_early_stop() -> None:
    history = (past(0, 0), past(1, 0))
    stop = run(fail(2, checkpoints_saved=0), history=history)
    later = run(fail(2, SCHED, checkpoints_saved=1), history=history)
    merged = merge_signals(stop, later)
    assert (stop.operation, merged.operation) == (Operation.TERMINATE, Operation.RESTART)


def test_merge_into_nothing_is_the_new_decision() -> None:
    new = run(fail(0))
    assert merge_signals(None, new) is new
    assert advice_changed(None, new)
    assert not advice_changed(None, run(fail(0, SCHED, state="COMPLETED")))


@given(
    st.lists(
        failures.map(
            lambda f: Failure(
                0, f.kind, f.state, f.exit_code, None, f.implicated_nodes, (), f.attempt_running, f.checkpoints_saved
            )
        ),
        min_size=1,
        max_size=6,
    )
)
def test_merging_signals_is_idempotent_and_exclusions_grow(signals: list[Failure]) -> None:
    current: Decision | None = None
    for signal in signals:
        new = run(signal)
        merged = merge_signals(current, new)
        if current is not None and current.operation is not Operation.NONE and merged.operation is not Operation.NONE:
            assert set(current.exclusions) <= set(merged.exclusions)
        assert merge_signals(merged, new) == merged  # the same signal again changes nothing
        current = merged


def test_advice_record_values() -> None:
    decision = run(fail(0, implicated_nodes=("n1",)))
    values = advice_record(decision, mode="observe", mode_reason="ceiling off", evidence_refs=("ev:1",))
    assert values["operation"] == "RESTART" and values["exclusions"] == ["n1"] and values["rule"] == "restart_allowed"
    assert (
        values["mode"] == "observe"
        and values["mode_reason"] == "ceiling off"
        and values["evidence"] == {"refs": ["ev:1"]}
    )
    assert values["expires_at"] == decision.expires_at


def test_advice_record_refuses_none_and_bad_mode() -> None:
    with pytest.raises(ValueError):
        advice_record(run(fail(0, SCHED, state="COMPLETED")), mode="act", mode_reason=None)
    with pytest.raises(ValueError):
        advice_record(run(fail(0)), mode="ACT", mode_reason=None)
