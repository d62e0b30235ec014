"""`recovery status` and `recovery watch` against a real `recovery serve`: the story sentence from the API, live."""

from __future__ import annotations

import asyncio
import io
import json
import threading

import pytest

from app.client import status, watch
from app.infra.config import Settings
from app.jobs import queries as job_queries
from app.jobs import service as jobs
from tests.factories import RECOVERED, registration, seed_stories

pytestmark = [pytest.mark.slow, pytest.mark.parametrize("database", ["sqlite"], indirect=True)]


class _Lines(io.StringIO):
    """Output that tells when a given text was written (watch runs in a thread)."""

    def __init__(self, wanted: str) -> None:
        super().__init__()
        self.wanted, self.seen = wanted, threading.Event()

    def write(self, text: str) -> int:
        if self.wanted in text:
            self.seen.set()
        return super().write(text)


async def test_status_and_watch_tell_the_story_from_a_running_service(live_server, database, sessions, tmp_path):
    await seed_stories(sessions)
    settings = Settings.build(data_dir=str(tmp_path))
    out = io.StringIO()
    code = await asyncio.to_thread(status, settings, str(RECOVERED), server=live_server.url, out=out)
    text = out.getvalue()
    assert code == 0 and f"job {RECOVERED} on test, workflow wf-recovered" in text
    assert "[recovered] Attempt 0 crashed (Xid 79) on gpu-b02 at line 812" in text
    assert f"dashboard: {live_server.url}/dashboard/jobs/{RECOVERED}/attempts/1" in text
    out = io.StringIO()
    code = await asyncio.to_thread(status, settings, f"{RECOVERED}/0", server=live_server.url, as_json=True, out=out)
    (attempt,) = json.loads(out.getvalue())["attempts"]
    assert code == 0 and attempt["story"]["result"].startswith("attempt 1 started on gpu-b03")
    missing = io.StringIO()
    assert await asyncio.to_thread(status, settings, "999999", server=live_server.url, out=missing) == 1
    assert "job 999999 is not recorded" in missing.getvalue()
    # a refused job: its reason, as the dashboard says it (issue 26), not "not recorded"
    async with sessions() as session, session.begin():
        await jobs.register_job(
            session,
            registration=registration(
                5, enrolment="ENVIRONMENT_MISMATCH", enrolment_reason="environment 'Test-Env' differs only in case"
            ),
        )
    refused = io.StringIO()
    assert await asyncio.to_thread(status, settings, "5", server=live_server.url, out=refused) == 1
    assert refused.getvalue() == (
        "recovery status: job 5 is recorded but not enrolled (environment mismatch), so Recovery does not look "
        "after it: environment 'Test-Env' differs only in case\n"
    )

    live = _Lines("watching")
    thread = threading.Thread(
        target=watch,
        args=(settings, str(RECOVERED)),
        kwargs={"server": live_server.url, "out": live, "max_updates": 1, "follow": True},
    )
    thread.start()
    try:
        assert await asyncio.to_thread(live.seen.wait, 30), live.getvalue()
        # the server registers the subscription just after "watching": write until the watcher has seen a change
        for state in ("COMPLETED", "FAILED", "COMPLETED", "FAILED", "COMPLETED"):
            async with sessions() as session, session.begin():
                job = await job_queries.find_job(session, slurm_job_id=RECOVERED)
                attempt = await job_queries.find_attempt(session, slurm_job_id=RECOVERED, attempt_index=1)
                await jobs.update_attempt(session, attempt=attempt, job=job, state=state)
            await asyncio.to_thread(thread.join, 4)
            if not thread.is_alive():
                break
    finally:
        await asyncio.to_thread(thread.join, 30)
    assert not thread.is_alive(), live.getvalue()
    after = live.getvalue().split("watching")[1]
    assert "[completed] Attempt 1 completed on gpu-b03 after loading checkpoint iteration 1200." in after or (
        "Attempt 1 ended FAILED on gpu-b03" in after
    )
