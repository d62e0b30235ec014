"""The advisor on both databases: one failure gives one Advice, generations move only with the decision."""

import logging

import pytest
from sqlalchemy import func, select

from app.feed.models import ChangeFeedEntry
from app.infra.context import AppContext
from app.slurm.errors import TransientSchedulerError
from tests.advice.helpers import SlurmLikeFake, acting, submit
from tests.factories import add_anomaly, advice_of, events
from worker.advisor import Advisor
from worker.observer import Observer


@pytest.fixture
def fake() -> SlurmLikeFake:
    return SlurmLikeFake()


@pytest.fixture
def observer(ctx: AppContext, fake: SlurmLikeFake) -> Observer:
    return Observer(ctx, fake)


@pytest.fixture
def advisor(ctx: AppContext) -> Advisor:
    return Advisor(ctx)


async def test_failed_attempt_gets_one_restart_advice_in_observe_without_the_ceiling(
    ctx, fake, observer, advisor
) -> None:
    await advisor.tick()  # positions start before the failure
    await submit(observer, fake, 11)
    fake.finish(11, "FAILED", exit_code=1)
    await observer.tick()
    await advisor.tick()
    [advice] = await advice_of(ctx, 11)
    assert (advice.operation, advice.rule, advice.generation, advice.attempt_index) == (
        "RESTART",
        "restart_allowed",
        1,
        0,
    )
    assert advice.mode == "observe" and "ceiling" in (advice.mode_reason or "")
    assert advice.active and advice.disposition == "PENDING" and advice.expires_at is not None
    [created] = await events(ctx, "advice.created")
    assert (
        created.payload["rule"] == "restart_allowed"
        and created.payload["generation"] == 1
        and created.attempt_index == 0
    )
    async with ctx.sessions() as session:
        assert (
            await session.scalar(
                select(func.count()).select_from(ChangeFeedEntry).where(ChangeFeedEntry.topic == "advice")
            )
            == 1
        )
    decisions = advisor.decisions
    await advisor.tick()
    assert advisor.decisions == decisions  # nothing new: no work, no scan


async def test_ceiling_on_gives_act_mode(ctx, fake) -> None:
    ctx = acting(ctx, acknowledge_scheduler_actions=True)
    observer, advisor = Observer(ctx, fake), Advisor(ctx)
    await submit(observer, fake, 12)
    fake.finish(12, "NODE_FAIL")
    await observer.tick()
    await advisor.tick()
    [advice] = await advice_of(ctx, 12)
    assert advice.mode == "act" and advice.exclusions == ["node1"]  # the one node it ran on failed


async def test_crash_line_then_failed_state_is_one_advice_one_generation(ctx, fake, observer, advisor) -> None:
    await submit(observer, fake, 13)
    await advisor.tick()
    anomaly = await add_anomaly(ctx, 13, kind="CRASH")
    await advisor.tick()
    [advice] = await advice_of(ctx, 13)
    assert advice.operation == "RESTART" and advice.generation == 1
    fake.finish(13, "FAILED", exit_code=1)
    await observer.tick()
    await advisor.tick()
    [advice] = await advice_of(ctx, 13)
    assert advice.generation == 1 and f"anomaly:{anomaly}" in advice.evidence["refs"]
    assert any(ref.startswith("attempt_state:") for ref in advice.evidence["refs"])
    assert len(await events(ctx, "advice.created")) == 1 and await events(ctx, "advice.updated") == []


async def test_new_node_evidence_bumps_the_generation(ctx, fake, observer, advisor) -> None:
    await submit(observer, fake, 14)
    await advisor.tick()
    await add_anomaly(ctx, 14, kind="CRASH", node="node1", category="xid")
    await advisor.tick()
    await add_anomaly(ctx, 14, kind="CRASH", node="node2", category="nccl")
    await advisor.tick()
    [advice] = await advice_of(ctx, 14)
    assert advice.generation == 2 and advice.exclusions == ["node1", "node2"]
    [updated] = await events(ctx, "advice.updated")
    assert updated.payload["previous"]["exclusions"] == ["node1"] and updated.payload["generation"] == 2


async def test_retry_limit_terminates_with_the_rule_and_exclusions_accumulate(ctx, fake, observer, advisor) -> None:
    await submit(observer, fake, 15, max_requeue_times=1)
    await advisor.tick()
    await add_anomaly(ctx, 15, node="node3", category="xid")
    fake.finish(15, "FAILED", exit_code=1)
    await observer.tick()
    await advisor.tick()
    await fake.requeue_hold(15)
    await fake.release(15)
    fake.start(15, ["node2"])
    await observer.tick()
    fake.finish(15, "FAILED", exit_code=1)
    await observer.tick()
    await advisor.tick()
    first, second = await advice_of(ctx, 15)
    assert (first.operation, first.exclusions) == ("RESTART", ["node3"])
    assert (second.operation, second.rule) == ("TERMINATE", "retry_limit")
    assert "retry limit 1 reached" in second.reason and second.exclusions == ["node3"]


async def test_no_requeue_ended_attempt_is_not_needed_once(ctx, fake, observer, advisor) -> None:
    await submit(observer, fake, 16, requeue=False)
    await advisor.tick()
    fake.finish(16, "FAILED", exit_code=1)
    await observer.tick()
    await advisor.tick()
    assert await advice_of(ctx, 16) == []
    [event] = await events(ctx, "advice.not_needed")
    assert "requeue" in event.payload["reason"] and event.payload["rule"] == "requeue_not_possible"
    restarted = Advisor(ctx)  # a new process catches up: still one event
    await restarted.tick()
    assert len(await events(ctx, "advice.not_needed")) == 1


async def test_crash_line_then_clean_completion_turns_restart_into_terminate(ctx, fake, observer, advisor) -> None:
    await submit(observer, fake, 17)
    await advisor.tick()
    await add_anomaly(ctx, 17, kind="CRASH", category="nan_loss")
    await advisor.tick()
    fake.finish(17, "COMPLETED")
    await observer.tick()
    await advisor.tick()
    [advice] = await advice_of(ctx, 17)
    assert (advice.operation, advice.rule, advice.generation) == ("TERMINATE", "job_completed", 2)


async def test_hang_on_a_running_attempt_and_catch_up_after_a_restart(ctx, fake, observer) -> None:
    await submit(observer, fake, 18)
    await add_anomaly(ctx, 18, kind="NO_PROGRESS", category="no_output")
    fake.finish(18, "FAILED", exit_code=1)  # failed while no advisor ran
    await observer.tick()
    await submit(observer, fake, 19)
    fake.finish(19, "TIMEOUT")
    await observer.tick()
    advisor = Advisor(ctx)
    await advisor.tick()
    [hang] = await advice_of(ctx, 18)
    [timeout] = await advice_of(ctx, 19)
    assert hang.operation == "RESTART" and "stopped making progress" in hang.reason
    assert timeout.operation == "RESTART" and "TIMEOUT" in timeout.reason


async def test_slowdown_needs_both_switches(ctx, fake, observer, advisor) -> None:
    await submit(observer, fake, 20)
    await advisor.tick()
    await add_anomaly(ctx, 20, kind="SLOWDOWN", category="throughput")
    await advisor.tick()
    assert await advice_of(ctx, 20) == []
    [event] = await events(ctx, "advice.not_needed")
    assert event.payload["rule"] == "slowdown_not_allowed"


async def _excluded_twice_then_crash_on_the_last_node(ctx, fake, observer, advisor, job_id: int):
    """Attempt 0 fails with evidence on node1 and node2; attempt 1 runs on node3 and crashes there."""
    await submit(observer, fake, job_id)
    await advisor.tick()
    await add_anomaly(ctx, job_id, node="node1", category="xid")
    await add_anomaly(ctx, job_id, node="node2", category="nccl")
    fake.finish(job_id, "FAILED", exit_code=1)
    await observer.tick()
    await advisor.tick()
    await fake.requeue_hold(job_id)
    await fake.set_excluded_nodes(job_id, ["node1", "node2"])
    await fake.release(job_id)
    fake.start(job_id, ["node3"])
    await observer.tick()
    await add_anomaly(ctx, job_id, index=1, node="node3", category="xid")
    await advisor.tick()
    return await advice_of(ctx, job_id)


async def test_partition_guard_keeps_the_newest_evidence_when_exclusions_would_cover_the_partition(
    ctx, fake, observer
) -> None:
    assert await fake.partition_nodes("debug") == ("node1", "node2", "node3")  # the job's partition, as on the lab
    fake.calls.clear()
    advisor = Advisor(ctx, fake)
    first, second = await _excluded_twice_then_crash_on_the_last_node(ctx, fake, observer, advisor, 21)
    assert (first.operation, first.exclusions) == ("RESTART", ["node1", "node2"])
    assert (second.attempt_index, second.operation, second.rule) == (1, "RESTART", "restart_allowed")
    assert second.exclusions == ["node3"]  # not node1..node3: the job could never run again
    assert "would leave no node in the partition" in second.reason
    assert "only the newest evidence's nodes (node3) are excluded" in second.reason
    assert fake.count("partition_nodes") == 1  # cached across the decisions


async def test_unknown_partition_means_no_guard_and_still_a_decision(ctx, fake, observer) -> None:
    fake.partitions = {}  # Slurm lists no node in the job's partition
    advisor = Advisor(ctx, fake)
    first, second = await _excluded_twice_then_crash_on_the_last_node(ctx, fake, observer, advisor, 22)
    assert await fake.partition_nodes("debug") is None
    assert (second.operation, second.exclusions) == ("RESTART", ["node1", "node2", "node3"])
    assert "partition" not in second.reason


async def test_failed_partition_lookup_never_blocks_a_decision(ctx, fake, observer, caplog) -> None:
    advisor = Advisor(ctx, fake)
    await submit(observer, fake, 23)
    await advisor.tick()
    fake.fail_next("partition_nodes", TransientSchedulerError("timed out after 15s", command=("sinfo", "--json")))
    await add_anomaly(ctx, 23, node="node2", category="xid")
    with caplog.at_level(logging.WARNING, logger="recovery.advisor"):
        await advisor.tick()
    [advice] = await advice_of(ctx, 23)
    assert (advice.operation, advice.exclusions) == ("RESTART", ["node2"])
    assert any("deciding without the partition guard" in record.getMessage() for record in caplog.records)


async def test_an_anomaly_recorded_while_no_advisor_ran_is_decided_after_a_restart(ctx, fake, observer) -> None:
    first = Advisor(ctx)
    await submit(observer, fake, 23)
    await first.tick()
    fake.finish(23, "FAILED", exit_code=1)
    await observer.tick()
    await first.tick()
    [advice] = await advice_of(ctx, 23)
    async with ctx.sessions() as session, session.begin():
        row = await session.get(type(advice), advice.id)
        row.active, row.disposition, row.disposition_reason = False, "ABANDONED", "ADVICE_EXPIRED"  # decided, closed
    # No advisor runs now; a late crash line naming a node is recorded for the decided attempt.
    await add_anomaly(ctx, 23, kind="CRASH", node="node3", category="xid")
    restarted = Advisor(ctx)
    await restarted.tick()
    assert (restarted.feed_position, restarted.anomaly_position) != (None, None)
    [advice] = await advice_of(ctx, 23)
    assert advice.generation == 2 and advice.exclusions == ["node3"] and advice.active


async def test_positions_are_stored_only_after_the_signals_before_them_were_decided(ctx, fake, observer) -> None:
    first = Advisor(ctx)
    await first.tick()
    await submit(observer, fake, 24)
    await add_anomaly(ctx, 24, kind="CRASH", node="node1", category="xid")

    async def broken(signal: object) -> int:
        raise RuntimeError("the decision failed")

    first.process = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        await first.tick()
    restarted = Advisor(ctx)
    await restarted.tick()
    [advice] = await advice_of(ctx, 24)
    assert advice.exclusions == ["node1"]
