"""The story cites the anomaly its Advice was decided on (both databases): a hang decided on NO_PROGRESS reads
as a hang even when the collective timeout it caused is recorded as a crash afterwards (observe mode: Recovery
does not act, so nothing is kept apart)."""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path

import pytest

from app.advice import stories
from app.domain.detection.rules_builtin import default_ruleset
from app.domain.detection.signatures import Classifier
from app.evidence import service as evidence
from app.infra.context import AppContext
from tests.advice.helpers import SlurmLikeFake, submit
from tests.factories import add_anomaly, advice_of, anomalies, attempt
from worker.advisor import Advisor
from worker.observer import Observer

HANG = Path(__file__).resolve().parent.parent / "fixtures" / "torchrun" / "ddp-hang.log"
# what the waiting rank printed when gloo's collective timeout fired after the other rank hung
TIMEOUT = next(line for line in HANG.read_text(encoding="utf-8").splitlines() if "Timed out waiting" in line)


@pytest.fixture
def fake() -> SlurmLikeFake:
    return SlurmLikeFake()


async def test_a_hang_decided_on_no_progress_reads_as_a_hang(ctx: AppContext, fake: SlurmLikeFake) -> None:
    observer, advisor = Observer(ctx, fake), Advisor(ctx)
    await advisor.tick()
    await submit(observer, fake, 81, node="node1", mode="observe")
    hang = await add_anomaly(ctx, 81, kind="NO_PROGRESS", category="NO_OUTPUT_TRAININGLOOP")
    await advisor.tick()
    [advice] = await advice_of(ctx, 81)
    assert advice.anomaly_id == hang

    # the reader classifies a traceback by its final exception line
    signal = Classifier(default_ruleset()).traceback_category(TIMEOUT)
    assert signal is not None
    target = await attempt(ctx, 81)
    async with ctx.sessions() as session, session.begin():
        row = await session.get(type(target), target.id)
        assert row is not None
        await evidence.record_crash(
            session,
            attempt=row,
            event=evidence.LineEvent(
                event_key=uuid.uuid4().hex,
                log_path="/logs/ddp-hang.log",
                line_number=27,
                line=TIMEOUT,
                source_time=None,
                read_at=dt.datetime.now(dt.UTC),
                signal=signal,
            ),
        )
    await advisor.tick()
    assert [x.kind for x in await anomalies(ctx)] == ["NO_PROGRESS", "CRASH"]  # the crash is the newest
    [advice] = await advice_of(ctx, 81)
    assert advice.anomaly_id == hang, "a later crash never replaces the hang the Advice was decided on"
    async with ctx.sessions() as session:
        [told] = (await stories.stories_of_jobs(session, job_ids=[advice.job_id]))[advice.job_id]
    assert told.anomaly is not None and told.anomaly.id == hang
    assert told.story.happened.startswith("Attempt 0 hung (no progress in its log)"), told.story.happened
    assert "crashed" not in told.story.sentence
