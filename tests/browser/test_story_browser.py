"""In Chromium: a job found by id from the jump box, and the story sentence of a recovered, a stopped and an
observe-only attempt, with the links along the chain (failure → Advice → next attempt)."""

from __future__ import annotations

from typing import Any

import pytest

from app.infra.config import Settings
from app.infra.context import AppContext
from app.main import create_app
from tests.factories import OBSERVED, RECOVERED, STOPPED, seed_stories
from tests.views.server import serve

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.parametrize("database", ["sqlite"], indirect=True)]


def _app(database: Any, settings: Settings) -> Any:
    values = {f: getattr(settings, f) for f in settings.__dataclass_fields__}
    values.update(
        database_url=database.url,
        cluster="test",
        environment="test-env",
        dev_no_auth=True,
        oidc_issuer="",
        session_secret="c" * 32,
    )
    configured = Settings.build(**values)
    return create_app(
        configured, ctx=AppContext(settings=configured, engine=database.engine, sessions=database.sessions)
    )


async def test_find_a_job_by_id_and_read_its_story(chromium, database, settings, sessions, screenshots) -> None:
    await seed_stories(sessions)
    async with serve(_app(database, settings)) as base:
        context = await chromium.new_context(viewport={"width": 1440, "height": 900})
        page = await context.new_page()
        problems: list[str] = []
        page.on("console", lambda msg: problems.append(msg.text) if msg.type == "error" else None)
        await page.goto(base + "/dashboard/advice")  # the jump box is on every page
        await page.fill("#jump-q", str(RECOVERED))
        await page.press("#jump-q", "Enter")
        await page.wait_for_url(f"{base}/dashboard/jobs/{RECOVERED}")
        story = page.locator("article.job .story .sentence").first
        assert (await story.inner_text()).startswith("Attempt 0 crashed (Xid 79) on gpu-b02")
        # job/attempt from the jump box, then follow the chain: the Advice, then the next attempt
        await page.fill("#jump-q", f"{RECOVERED}/0")
        await page.press("#jump-q", "Enter")
        await page.wait_for_url(f"{base}/dashboard/jobs/{RECOVERED}/attempts/0")
        sentence = await page.locator("#story .sentence").inner_text()
        assert sentence == (
            "Attempt 0 crashed (Xid 79) on gpu-b02 at line 812 of 5101-0.err; Recovery restarted it excluding "
            "gpu-b02; attempt 1 started on gpu-b03 and loaded checkpoint iteration 1200."
        )
        assert await page.locator("#story .outcome").inner_text() == "recovered"
        await page.click("#story a:text('the Advice')")
        assert await page.locator("#advice").is_visible()
        await page.click("#story a:text('attempt 1')")
        await page.wait_for_url(f"{base}/dashboard/jobs/{RECOVERED}/attempts/1")
        assert "follows" in await page.locator("#story .chain").inner_text()
        await page.screenshot(path=str(screenshots / "story-recovered.png"), full_page=True)

        await page.goto(f"{base}/dashboard/jobs/{STOPPED}/attempts/0")
        assert (await page.locator("#story .sentence").inner_text()).endswith(
            "Recovery stopped here by rule retry_limit; stopped: resubmit (sbatch the same script); "
            "no checkpoint save was seen in its logs."
        )
        assert await page.locator("#story .outcome").inner_text() == "stopped"

        await page.goto(f"{base}/dashboard/jobs/{OBSERVED}/attempts/0")
        observed = await page.locator("#story .sentence").inner_text()
        assert "observe only: would have restarted as attempt 1" in observed and "nothing was done" in observed
        chip = page.locator("#advice .action-shadow")
        assert await chip.inner_text() == "observe only · not run"
        # never the SUCCEEDED look: the shadow chip's colours differ from a succeeded one's
        background = await chip.evaluate("el => getComputedStyle(el).backgroundColor")
        assert background != "rgb(220, 252, 231)"
        await page.screenshot(path=str(screenshots / "story-observed.png"), full_page=True)

        # the Overview: outcome column and facets, each a filter
        await page.goto(base + "/dashboard/workflow")
        await page.screenshot(path=str(screenshots / "story-overview.png"), full_page=True)
        await page.click("#facets a[data-value='stopped']")
        await page.wait_for_url(f"{base}/dashboard/workflow?outcome=stopped")
        rows = page.locator("#workflow-table tr[data-workflow]")
        assert await rows.count() == 1 and await rows.first.get_attribute("data-workflow") == "wf-stopped"
        # an unknown id: a clear page that says what to try
        await page.fill("#jump-q", "no-such-thing")
        await page.press("#jump-q", "Enter")
        assert "No job, attempt or workflow matches" in await page.locator("main").inner_text()
        await context.close()
        # the only failed loads are the deliberate 404 page (and the browser's favicon.ico look-up)
        assert not [p for p in problems if "status of 404" not in p], problems
