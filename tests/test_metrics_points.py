"""The instrumented points move their metrics (both databases): detection, decision, reconciliation, feed,
observer, lease and active Advice."""

from __future__ import annotations

import datetime as dt

from prometheus_client import REGISTRY

from app.advice import queries as advice_queries
from app.advice import service as advice_service
from app.domain.control.planner import Disposition
from app.evidence import service as evidence
from app.feed import queries as feed_queries
from app.feed import service as feed
from app.infra.context import AppContext
from app.infra.db import utcnow
from app.slurm.fake import FakeScheduler
from tests.advice.helpers import submit
from tests.factories import attempt
from worker.advisor import Advisor
from worker.observer import Observer
from worker.runner import WorkerRunner


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_detection_decision_and_reconciliation_are_measured(ctx: AppContext) -> None:
    fake = FakeScheduler()
    observer = Observer(ctx, fake)
    ticks = value("recovery_observer_tick_seconds_count")
    await submit(observer, fake, 811)
    assert value("recovery_observer_tick_seconds_count") == ticks + 1
    assert value("recovery_observer_jobs_seen") == 1

    detected = value("recovery_detection_latency_seconds_count", kind="CRASH", detector="signature")
    slow = value("recovery_detection_latency_seconds_bucket", kind="CRASH", detector="signature", le="30.0")
    target = await attempt(ctx, 811)
    async with ctx.sessions() as session, session.begin():
        row = await evidence.record_anomaly(
            session,
            attempt=target,
            kind="CRASH",
            category="segfault",
            detector="signature",
            event_key="metrics-811",
            message="segfault",
            source_time=utcnow() - dt.timedelta(seconds=45),  # written 45 s before it was recorded
        )
    assert row is not None
    assert value("recovery_detection_latency_seconds_count", kind="CRASH", detector="signature") == detected + 1
    # 45 s of latency lands above the 30 s bucket
    assert value("recovery_detection_latency_seconds_bucket", kind="CRASH", detector="signature", le="30.0") == slow

    decided = value("recovery_decision_latency_seconds_count", operation="RESTART")
    await Advisor(ctx, fake).tick()
    assert value("recovery_decision_latency_seconds_count", operation="RESTART") == decided + 1

    runner = WorkerRunner(ctx, [], holder="metrics-test-holder")
    await runner._refresh_lease()
    assert value("recovery_lease_held", lease=runner.lease, holder="metrics-test-holder") == 1
    assert value("recovery_lease_epoch", lease=runner.lease) >= 1
    assert value("recovery_active_advice", cluster=ctx.settings.cluster, operation="RESTART") == 1

    abandoned = value("recovery_reconciliation_outcomes_total", disposition="ABANDONED", reason="JOB_NOT_FOUND")
    async with ctx.sessions() as session, session.begin():
        advice = await advice_queries.advice_for_attempt(session, attempt_id=target.id)
        assert advice is not None
        await advice_service.set_status(
            session,
            advice=advice,
            disposition=Disposition.ABANDONED,
            reason="JOB_NOT_FOUND",
            message="gone",
            next_reconcile_at=None,
        )
    assert (
        value("recovery_reconciliation_outcomes_total", disposition="ABANDONED", reason="JOB_NOT_FOUND")
        == abandoned + 1
    )
    await runner._refresh_lease()
    assert value("recovery_active_advice", cluster=ctx.settings.cluster, operation="RESTART") == 0


async def test_feed_lag_is_the_age_of_the_oldest_entry_read(ctx: AppContext) -> None:
    async with ctx.sessions() as session, session.begin():
        start = await feed_queries.latest_id(session)
        await feed.append(session, topic="attempt", entity_id=1, payload={})
    async with ctx.sessions() as session:
        entries = await feed_queries.read_since(session, after_id=start, topics=["attempt"])
    assert entries
    lag = REGISTRY.get_sample_value("recovery_feed_lag_seconds", {"reader": "attempt"})
    assert lag is not None and 0 <= lag < 3600
