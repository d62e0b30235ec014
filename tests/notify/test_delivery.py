"""Notifications on both databases: one outbox row per Advice generation, written with the change, delivered by a
real `recovery worker` to a real HTTP receiver that fails for a while: each arrives once, in order, across kill -9."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from app.advice import queries as advice_queries
from app.advice import service as advice_service
from app.domain.admission.mode import ModeDecision
from app.domain.control.planner import Disposition
from app.domain.decision.advice import Decision, Operation
from app.domain.fleetwide.notify import DEFAULT_EVENTS, mask_url, parse_target
from app.infra.config import Settings, SettingsError
from app.infra.context import AppContext
from app.jobs.models import Attempt
from app.notify.models import Notification, NotificationDelivery
from app.slurm.fake import FakeScheduler
from tests.advice.helpers import submit
from tests.notify.helpers import Receiver
from worker.observer import Observer

MODE = ModeDecision("act", "test")
JOBS = (701, 702, 703)


def restart(*nodes: str) -> Decision:
    return Decision(Operation.RESTART, "attempt 0 crashed (segfault)", "restart_allowed", tuple(nodes))


def terminate() -> Decision:
    return Decision(Operation.TERMINATE, "the run finished writing its last checkpoint", "done")


def test_targets_and_rules() -> None:
    plain = parse_target("json://127.0.0.1:9/hook")
    assert plain.events == DEFAULT_EVENTS and "restart" not in plain.events
    ruled = parse_target("[terminate, restart]jsons://user:hunter2@example.org/hook")
    assert ruled.events == {"terminate", "restart"} and ruled.url == "jsons://user:hunter2@example.org/hook"
    assert "hunter2" not in ruled.masked and "user:***@" in ruled.masked
    assert "T0123456789ABCDEF" not in mask_url("slack://T0123456789ABCDEF/B01/xyz")
    assert parse_target("[*]mailto://a:b@example.org").wants("node_suspect")
    with pytest.raises(SettingsError, match="unknown notification event"):
        Settings.from_env({"RECOVERY_NOTIFY_URLS": "[sometimes]json://x/y"})
    with pytest.raises(SettingsError, match="not a notification URL"):
        Settings.from_env({"RECOVERY_NOTIFY_URLS": "hooks.example.org"})
    assert Settings.from_env({"RECOVERY_NOTIFY_URLS": "json://a/b  [abandoned]mailto://c@d"}).notify_urls == (
        "json://a/b",
        "[abandoned]mailto://c@d",
    )


async def _seed(ctx: AppContext) -> list[str]:
    """Three jobs: RESTART (gen 1) then TERMINATE (gen 2); the first also ABANDONED. Returns the keys in order."""
    fake = FakeScheduler()
    observer = Observer(ctx, fake)
    for job_id in JOBS:
        await submit(observer, fake, job_id)
    keys: list[str] = []
    async with ctx.sessions() as session:
        attempts = {a.slurm_job_id: a for a in (await session.scalars(select(Attempt))).all()}
    for decision in (restart("n1"), restart("n1"), terminate()):  # the repeat changes nothing: no message
        for job_id in JOBS:
            async with ctx.sessions() as session, session.begin():
                attempt = await session.get(Attempt, attempts[job_id].id)
                assert attempt is not None
                outcome = await advice_service.record_decision(
                    session, attempt=attempt, decision=decision, mode=MODE, signal="test"
                )
                if outcome.changed:
                    assert outcome.advice is not None
                    event = "terminate" if decision.operation is Operation.TERMINATE else "restart"
                    keys.append(f"{event}:{outcome.advice.id}:{outcome.advice.generation}")
    async with ctx.sessions() as session, session.begin():
        advice = await advice_queries.advice_for_attempt(session, attempt_id=attempts[JOBS[0]].id)
        assert advice is not None
        for _ in range(2):  # a second identical status is no change: no second message
            await advice_service.set_status(
                session,
                advice=advice,
                disposition=Disposition.ABANDONED,
                reason="JOB_NOT_FOUND",
                message="neither slurmctld nor accounting knows the job",
                next_reconcile_at=None,
            )
        keys.append(f"abandoned:{advice.id}:{advice.generation}")
    return keys


async def test_outbox_row_per_generation_in_the_same_transaction(ctx: AppContext) -> None:
    keys = await _seed(ctx)
    async with ctx.sessions() as session:
        rows = (await session.scalars(select(Notification).order_by(Notification.id))).all()
    assert [r.dedup_key for r in rows] == keys
    assert len(keys) == 2 * len(JOBS) + 1
    assert rows[0].link_path == f"/dashboard/jobs/{JOBS[0]}/attempts/0"
    assert "What happened: attempt 0 crashed" in rows[0].body and "Decided: RESTART" in rows[0].body

    # A change rolled back takes its notification with it.
    async with ctx.sessions() as session:
        attempt = await session.scalar(select(Attempt).where(Attempt.slurm_job_id == JOBS[1]))
    with pytest.raises(RuntimeError):
        async with ctx.sessions() as session, session.begin():
            attempt = await session.get(Attempt, attempt.id if attempt else 0)
            assert attempt is not None
            await advice_service.record_decision(
                session, attempt=attempt, decision=restart("n9"), mode=MODE, signal="test"
            )
            raise RuntimeError("roll back")
    async with ctx.sessions() as session:
        assert await session.scalar(select(func.count(Notification.id))) == len(keys)


def _wait(what: str, check: Any, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[Receiver]:
    r = Receiver(tmp_path)
    yield r
    r.stop()


@pytest.mark.slow
async def test_worker_delivers_each_message_once_in_order_across_kill_9(
    ctx: AppContext, receiver: Receiver, tmp_path: Path
) -> None:
    keys = await _seed(ctx)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECOVERY_")}
    env.update(
        RECOVERY_DATABASE_URL=ctx.settings.database_url,
        RECOVERY_DATA_DIR=str(tmp_path / "data"),
        RECOVERY_CLUSTER=ctx.settings.cluster,
        RECOVERY_NOTIFY_URLS=f"[*]json://127.0.0.1:{receiver.port}/hook",
        RECOVERY_NOTIFY_MAX_BACKOFF="1",
        RECOVERY_PUBLIC_URL="https://recovery.example.org",
        RECOVERY_LEASE_SECONDS="2",
        RECOVERY_SLURM_BIN_DIR=str(tmp_path / "no-slurm"),  # no Slurm: the notifier must not care
        RECOVERY_LOG_FORMAT="json",
    )

    def worker(name: str) -> subprocess.Popen[bytes]:
        with (tmp_path / f"{name}.log").open("w") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "app.cli", "worker"], env=env, cwd=tmp_path, stdout=log, stderr=log
            )

    first = worker("worker1")
    try:
        _wait("the receiver to refuse a few tries", lambda: receiver.failed() >= 3)
        assert receiver.messages() == []
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    second = worker("worker2")
    try:
        seen = receiver.failed()
        _wait("the new worker to take over and try again", lambda: receiver.failed() >= seen + 2)
        receiver.flag.unlink()  # the receiver recovers
        _wait("every message", lambda: len(receiver.messages()) >= len(keys))

        async def all_sent() -> bool:
            async with ctx.sessions() as session:
                statuses = (await session.scalars(select(NotificationDelivery.status))).all()
            return len(statuses) == len(keys) and set(statuses) == {"SENT"}

        deadline = time.monotonic() + 30
        while not await all_sent():
            assert time.monotonic() < deadline, "deliveries not all SENT"
            time.sleep(0.2)
    finally:
        second.terminate()
        second.wait(timeout=20)
    messages = receiver.messages()
    got = [re.search(r"Key: (\S+)", m["message"]).group(1) for m in messages]  # type: ignore[union-attr]
    assert sorted(got) == sorted(keys), (got, keys)  # every message, exactly once
    for job_id in JOBS:  # in order per job
        mine = [k for k, m in zip(got, messages, strict=True) if f"job {job_id} " in m["title"]]
        assert mine == [k for k in keys if k in mine], (job_id, mine)
    # Structured logs: the notifier's lines name their component, cluster and job; no target URL leaks a secret.
    import json

    lines = [json.loads(line) for line in (tmp_path / "worker2.log").read_text().splitlines() if line.startswith("{")]
    notifier = [entry for entry in lines if entry["component"] == "notifier"]
    assert notifier and all(e["cluster"] == ctx.settings.cluster and e["job_id"] in JOBS for e in notifier)
    first_message = messages[got.index(keys[0])]
    assert f"job {JOBS[0]} attempt 0" in first_message["title"]
    assert "What happened:" in first_message["message"] and "Decided: RESTART" in first_message["message"]
    assert f"https://recovery.example.org/dashboard/jobs/{JOBS[0]}/attempts/0" in first_message["message"]


async def test_targets_changed_later_neither_replay_history_nor_keep_retrying(ctx: AppContext) -> None:
    import dataclasses

    from worker.notifier import Notifier

    await _seed(ctx)
    sent: list[str] = []

    def refuse(target: Any, title: str, body: str) -> bool:
        sent.append(target.url)
        return False

    first = acting_with(ctx, notify_urls=("[*]json://first.invalid/hook",))
    notifier = Notifier(first, sender=refuse)
    await notifier.tick()
    assert sent == ["json://first.invalid/hook"]  # one probe for the target, then it backs off
    await notifier.tick()
    assert len(sent) == 1
    async with ctx.sessions() as session:
        statuses = (await session.scalars(select(NotificationDelivery.status))).all()
    assert len(statuses) == 2 * len(JOBS) + 1 and set(statuses) == {"PENDING"}

    # The operator replaces the target: the old one's deliveries are dropped, the new one gets only new events.
    second = Notifier(
        dataclasses.replace(
            first, settings=dataclasses.replace(first.settings, notify_urls=("json://second.invalid/x",))
        )
    )
    await second.tick()
    async with ctx.sessions() as session:
        statuses = (await session.scalars(select(NotificationDelivery.status))).all()
        unfanned = await session.scalar(select(func.count(Notification.id)).where(Notification.fanned_out.is_(False)))
    assert set(statuses) == {"DROPPED"} and unfanned == 0


def acting_with(ctx: AppContext, **changes: Any) -> AppContext:
    import dataclasses

    return dataclasses.replace(ctx, settings=dataclasses.replace(ctx.settings, **changes))


async def test_watchdog_release_is_one_message_per_release(ctx: AppContext) -> None:
    from app.domain.control.planner import StepKind

    await _seed(ctx)
    async with ctx.sessions() as session, session.begin():
        attempt = await session.scalar(select(Attempt).where(Attempt.slurm_job_id == JOBS[1]))
        assert attempt is not None
        advice = await advice_queries.advice_for_attempt(session, attempt_id=attempt.id)
        assert advice is not None
        for key, succeeded in (("wd:1", False), ("wd:2", True)):
            action = await advice_service.begin_action(
                session, advice=advice, step=StepKind.RELEASE, key=key, command="scontrol release 702", actor="watchdog"
            )
            await advice_service.finish_action(
                session,
                action=action,
                advice=advice,
                succeeded=succeeded,
                duration_ms=3,
                detail="stale hold: held 901 s by our requeue",
                component="watchdog",
                event_type="watchdog.release",
            )
        rows = (await session.scalars(select(Notification).where(Notification.event == "watchdog_release"))).all()
    assert [r.dedup_key for r in rows] == [f"watchdog_release:{advice.id}:{action.id}"]  # the failed try sent nothing
    assert "stale hold" in rows[0].body and f"job {JOBS[1]} attempt 0" in rows[0].title
