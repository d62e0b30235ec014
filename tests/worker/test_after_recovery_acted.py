"""A real torchrun capture read by the collector, decided by the advisor, acted on by the controller (both
databases): lines printed after Recovery's requeue-hold are kept apart, never new anomalies; the Advice and the
story cite the root cause (the SIGKILLed rank on node2), not the survivor's gloo error or srun's Terminated."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from sqlalchemy import select, update

from app.advice import stories
from app.advice.models import SchedulerAction
from app.evidence.queries import AFTER_RECOVERY_ACTED
from app.infra.context import AppContext
from app.notify.models import Notification
from app.slurm.fake import make_job
from tests.advice.helpers import SlurmLikeFake, acting, comment
from tests.factories import actions, advice_of, anomalies, events
from tests.worker.helpers import Clock, collector_for
from worker.advisor import Advisor
from worker.controller import Controller
from worker.observer import Observer

CAPTURE = Path(__file__).resolve().parent.parent / "fixtures" / "torchrun" / "ddp-kill.log"
LINES = CAPTURE.read_text(encoding="utf-8").splitlines(keepends=True)
# Attempt 0 of the capture: up to its failure block (line 60), then what followed until srun gave up (line 149).
BEFORE = LINES[:60]
AFTER = LINES[60:149]
# In the capture's own time: the launcher's summary is stamped 09:10:57.937, its SIGTERM to the survivor
# 09:10:58.589. Recovery's requeue-hold is placed between them, where a real run puts it.
ACTED_AT = dt.datetime(2026, 12, 5, 9, 10, 58, tzinfo=dt.UTC)


@pytest.fixture
def fake() -> SlurmLikeFake:
    return SlurmLikeFake()


async def test_lines_after_recovery_acted_are_kept_apart_and_the_story_cites_the_root_cause(
    ctx: AppContext, fake: SlurmLikeFake, tmp_path: Path
) -> None:
    assert "Signal 9 (SIGKILL)" in BEFORE[-1] and "Force Terminated" in AFTER[-1]
    out = tmp_path / "ddp-kill.out"
    out.write_text("".join(BEFORE))
    act = acting(ctx, acknowledge_scheduler_actions=True)
    clock = Clock(dt.datetime.now(dt.UTC))
    observer, advisor, collector = Observer(act, fake), Advisor(act), collector_for(act, clock)
    await advisor.tick()  # positions start here
    fake.add(make_job(71, comment=comment(), stdout=str(out), stderr=str(out)))
    fake.start(71, ["node1", "node2"])
    await observer.tick()
    await collector.tick()
    crashes = await anomalies(act)
    assert crashes and {x.kind for x in crashes} == {"CRASH"}
    await advisor.tick()
    [advice] = await advice_of(act, 71)
    assert advice.operation == "RESTART"
    cited = next(x for x in crashes if x.id == advice.anomaly_id)
    # the launcher's block names the SIGKILLed process; the survivor's gloo error is a consequence
    assert (cited.category, cited.line_number, (cited.details or {}).get("rank")) == ("HOST_OOM", 58, 1)
    gloo = next(x for x in crashes if "Connection reset by peer" in (x.details or {}).get("detail", ""))
    assert gloo.details.get("knownConsequence") is True
    # decided on every line read so far: the reason, like the story, is about the SIGKILLed rank
    assert advice.reason.startswith("attempt 0 crashed (HOST_OOM, outlook application), fingerprint fp-")
    assert cited.details["fingerprint"] in advice.reason
    async with act.sessions() as session:
        [note] = (await session.scalars(select(Notification).where(Notification.advice_id == advice.id))).all()
    assert "Evidence: CRASH HOST_OOM on node2 at ddp-kill.out:58" in note.body, note.body

    await Controller(act, fake).tick()
    [hold, *_] = await actions(act, advice.id)
    assert (hold.step, hold.status) == ("requeue_hold", "SUCCEEDED")
    async with act.sessions() as session, session.begin():
        await session.execute(update(SchedulerAction).where(SchedulerAction.id == hold.id).values(started_at=ACTED_AT))
    detected_before = len(await events(act, "anomaly.detected"))

    with out.open("a", encoding="utf-8") as handle:
        handle.write("".join(AFTER))
    clock.advance(act.settings.collector_poll_interval + 1)
    await collector.tick()
    rows = await anomalies(act)
    new = [x for x in rows if x.id not in {c.id for c in crashes}]
    assert new, "the SIGTERM, the lost store and srun's Terminated were read"
    assert {x.kind for x in new} == {AFTER_RECOVERY_ACTED}, [(x.kind, x.line_number) for x in new]
    assert all(x.details["afterRecoveryActed"]["step"] == "requeue_hold" for x in new)
    assert any("srun: error: node1: task 0: Terminated" in (x.line or "") for x in new)
    assert len(await events(act, "anomaly.detected")) == detected_before, "no anomaly.detected for them"
    assert len(await events(act, "evidence.after_recovery_acted")) == len(new)

    # The attempt's end is decided again: nothing new is cited, and srun's first non-zero exit (kept apart,
    # printed after the hold) still says where the killed rank ran.
    await observer.tick()
    await advisor.tick()
    [advice] = await advice_of(act, 71)
    assert advice.anomaly_id == cited.id
    [cited] = [x for x in await anomalies(act) if x.id == advice.anomaly_id]
    assert cited.node == "node2"
    async with act.sessions() as session:
        told = (await stories.stories_of_jobs(session, job_ids=[advice.job_id]))[advice.job_id]
    happened = told[0].story.happened
    # the block's `host :` is the lab's shared `localhost`: the node came from the program's start-up line naming
    # the killed PID with an allocated node, and the story says so
    assert happened.startswith(
        "Attempt 0 crashed (HOST OOM) on node2 (a line naming the failed process's rank or PID) at line 58"
    ), happened
    assert "rank 1/2 on node2 (pid 3832" in (cited.details or {}).get("nodeFromLine", ""), cited.details
    assert told[0].anomaly is not None and told[0].anomaly.id == cited.id
