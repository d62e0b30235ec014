"""Fleet-wide trust rules: budgets, storms, node reputation (K jobs within W, TTL, renewal, clear, pin), drains."""

import datetime as dt

from app.domain.decision.advice import Failure, JobPolicy, Operation, SitePolicy, decide
from app.domain.decision.retry import FailureKind
from app.domain.fleetwide import trust as fleet

T0 = dt.datetime(2026, 12, 1, 8, 0, tzinfo=dt.UTC)
LIMITS = fleet.BudgetLimits(workflow_restarts=3, workflow_window=3600, cluster_restarts=20, cluster_window=600)
RULES = fleet.ReputationRules(jobs=3, window=3600, ttl=7200)


def at(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def test_budget_allows_until_the_workflow_budget_is_spent() -> None:
    ok = fleet.budget_verdict(limits=LIMITS, workflow_used=2, cluster_used=5, workflow="wf", cluster="c")
    spent = fleet.budget_verdict(limits=LIMITS, workflow_used=3, cluster_used=5, workflow="wf", cluster="c")
    assert ok.allowed and not spent.allowed
    assert spent.budget == fleet.WORKFLOW_BUDGET
    assert "workflow wf already had 3 automatic restart(s) in the last 1 hour (budget 3" in spent.message


def test_an_extension_adds_room_and_the_cluster_budget_still_applies() -> None:
    extended = fleet.budget_verdict(
        limits=LIMITS, workflow_used=3, cluster_used=5, workflow_extra=2, workflow="wf", cluster="c"
    )
    assert extended.allowed
    cluster = fleet.budget_verdict(limits=LIMITS, workflow_used=0, cluster_used=20, workflow="wf", cluster="c")
    assert (cluster.allowed, cluster.budget) == (False, fleet.CLUSTER_BUDGET)
    assert "in the last 10 minutes (budget 20" in cluster.message
    more = fleet.budget_verdict(limits=LIMITS, workflow_used=0, cluster_used=20, cluster_extra=1, workflow="wf")
    assert more.allowed


def test_zero_means_no_budget_and_a_job_without_workflow_counts_only_for_the_cluster() -> None:
    none = fleet.BudgetLimits(workflow_restarts=0, cluster_restarts=0)
    assert fleet.budget_verdict(limits=none, workflow_used=99, cluster_used=999, workflow="wf").allowed
    assert fleet.budget_verdict(limits=LIMITS, workflow_used=99, cluster_used=0, workflow=None).allowed


def test_storm_needs_the_threshold_and_zero_disables_it() -> None:
    assert fleet.storm_detected(failing_jobs=10, threshold=10)
    assert not fleet.storm_detected(failing_jobs=9, threshold=10)
    assert not fleet.storm_detected(failing_jobs=500, threshold=0)
    assert "3 distinct jobs failed within 5 minutes" in fleet.storm_message(failing_jobs=3, window=300, cluster="c")


def blames(*pairs: tuple[int, float]) -> list[fleet.Blame]:
    return [fleet.Blame(job_key=job, at=at(minute)) for job, minute in pairs]


def test_a_node_blamed_in_three_distinct_jobs_within_the_window_is_suspect_until_its_ttl() -> None:
    found = blames((1, 0), (2, 10), (3, 20))
    verdict = fleet.node_verdict(found, rules=RULES, now=at(21))
    assert (verdict.state, verdict.suspect_until, verdict.jobs) == (fleet.NODE_SUSPECT, at(20 + 120), (1, 2, 3))
    assert fleet.node_verdict(found, rules=RULES, now=at(141)).state == fleet.NODE_EXPIRED


def test_the_same_job_twice_or_blames_too_far_apart_do_not_count() -> None:
    assert fleet.node_verdict(blames((1, 0), (1, 5), (2, 10)), rules=RULES, now=at(11)).state == fleet.NODE_OK
    apart = blames((1, 0), (2, 40), (3, 70))  # 70 minutes between the first and the third: W is 60
    assert fleet.node_verdict(apart, rules=RULES, now=at(71)).state == fleet.NODE_OK


def test_a_blame_while_suspect_renews_the_ttl() -> None:
    found = blames((1, 0), (2, 10), (3, 20), (4, 100))
    verdict = fleet.node_verdict(found, rules=RULES, now=at(150))
    assert (verdict.state, verdict.suspect_until) == (fleet.NODE_SUSPECT, at(100 + 120))


def test_clearing_forgets_earlier_blames_and_pinning_overrides() -> None:
    found = blames((1, 0), (2, 10), (3, 20))
    cleared = fleet.node_verdict(found, rules=RULES, now=at(30), cleared_at=at(25))
    assert cleared.state == fleet.NODE_CLEARED
    assert fleet.node_verdict([], rules=RULES, now=at(30), pinned=True).state == fleet.NODE_PINNED
    assert fleet.node_verdict(found, rules=fleet.ReputationRules(jobs=0), now=at(21)).state == fleet.NODE_OK


def test_only_infrastructure_evidence_counts() -> None:
    assert fleet.counts_as_node_evidence(outlook="infrastructure")
    assert fleet.counts_as_node_evidence(outlook=None, state="NODE_FAIL")
    assert not fleet.counts_as_node_evidence(outlook="application")
    assert not fleet.counts_as_node_evidence(outlook="transient", state="FAILED")


def test_suspects_join_the_exclusions_within_the_partition_guard() -> None:
    assert fleet.with_suspects(["n2"], ["n3"], ["n1", "n2", "n3"]) == (
        ("n2", "n3"),
        "Also excluding n3: suspect for the cluster (blamed in several jobs).",
    )
    # n1 would be the last node of the partition: left out, and said so
    excluded, note = fleet.with_suspects(["n2"], ["n1", "n3"], ["n1", "n2", "n3"])
    assert excluded == ("n1", "n2") and note is not None and "n3 are not excluded" in note
    # a suspect outside the job's partition is not named
    assert fleet.with_suspects([], ["other9"], ["n1", "n2"]) == ((), None)
    assert fleet.with_suspects([], ["n9"], None) == (("n9",), fleet.with_suspects([], ["n9"], None)[1])


def test_decide_excludes_cluster_suspects_on_restart() -> None:
    failure = Failure(attempt_index=0, kind=FailureKind.CRASH, category="cuda_error", implicated_nodes=("n1",))
    decision = decide(
        failure=failure,
        policy=JobPolicy(max_requeue_times=2),
        site=SitePolicy(),
        partition_nodes=("n1", "n2", "n3", "n4"),
        now=T0,
        suspect_nodes=("n3",),
    )
    assert decision.operation is Operation.RESTART
    assert decision.exclusions == ("n1", "n3")
    assert "suspect for the cluster" in decision.reason


def test_drain_capacity_rounds_down_and_never_takes_the_whole_partition() -> None:
    assert fleet.drain_capacity(partition_size=10, max_fraction=0.1) == 1
    assert fleet.drain_capacity(partition_size=9, max_fraction=0.1) == 0
    assert fleet.drain_capacity(partition_size=3, max_fraction=1.0) == 2
    assert fleet.drain_capacity(partition_size=1, max_fraction=1.0) == 0
    ok, _ = fleet.drain_allowed(node="n1", partition_nodes=["n1", "n2", "n3"], drained=[], max_fraction=0.34)
    refused, why = fleet.drain_allowed(node="n2", partition_nodes=["n1", "n2", "n3"], drained=["n1"], max_fraction=0.34)
    assert ok and not refused and "allows 1" in why
    assert fleet.drain_reason(node="n1", jobs=[1, 2, 3]) == "recovery: suspect after hardware errors in jobs 1,2,3"
