"""Issue 26 in real Chromium: on a 390×844 phone every table is a list of full-width cards (no sideways scroll, no
blank bands), the header is compact and the story is on the first screen; at 1440×900 the Overview fits the screen
and gives the story its own line; colours follow what a person must do."""

from __future__ import annotations

from typing import Any

import pytest

from app.infra.config import Settings
from app.infra.context import AppContext
from app.jobs import service as jobs
from app.main import create_app
from tests.factories import OBSERVED, STOPPED, dashboard_registration, seed_history, seed_stories
from tests.views.server import serve

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.parametrize("database", ["sqlite"], indirect=True)]

OVERFLOW = "document.documentElement.scrollWidth - document.documentElement.clientWidth"
# Every visible cell of a grid table: its width, height and whether it holds text (as the browser laid it out).
CELLS = """() => [...document.querySelectorAll('table.grid td')].filter(td => td.offsetParent !== null).map(td => {
  const r = td.getBoundingClientRect();
  return {w: r.width, h: r.height, text: td.innerText.trim().length, label: td.dataset.label || ''};
})"""
PAGES = [
    "/dashboard/",
    "/dashboard/workflow",
    "/dashboard/workflow/llama-pretrain",
    "/dashboard/jobs/4242/attempts/0",
    "/dashboard/jobs/4242/attempts/0/timeline",
    "/dashboard/advice?show=all",
    "/dashboard/audit",
    "/dashboard/nodes",
    "/dashboard/not-enrolled",
]


async def _seed(sessions: Any) -> None:
    await seed_history(sessions)
    await seed_stories(sessions)
    async with sessions() as session, session.begin():
        await jobs.register_job(
            session,
            registration=dashboard_registration(
                9001,
                enrolment="ENVIRONMENT_MISMATCH",
                enrolment_reason="environment 'Test-Env' (they differ only in case or surrounding spaces)",
            ),
        )


async def test_phone_cards_compact_header_and_story_first(chromium, database, sessions, tmp_path, screenshots):
    await _seed(sessions)
    settings = Settings.build(
        database_url=database.url, data_dir=str(tmp_path), cluster="test", environment="test-env", dev_no_auth=True
    )
    app = create_app(settings, ctx=AppContext(settings=settings, engine=database.engine, sessions=database.sessions))
    async with serve(app) as base:
        phone = await chromium.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
        page = await phone.new_page()
        for path in PAGES:
            await page.goto(base + path)
            assert await page.evaluate(OVERFLOW) <= 0, f"{path} scrolls sideways at 390 px"
            header = await page.evaluate("document.querySelector('header.topbar').getBoundingClientRect().height")
            assert header <= 100, f"{path}: the header takes {header:.0f} of 844 px"
            assert await page.locator("table.grid thead:visible").count() == 0, f"{path}: column headings shown"
            for cell in await page.evaluate(CELLS):
                # a card's field spans the card: never a narrow column stretched tall beside off-screen text
                assert cell["w"] >= 300, f"{path}: a {cell['w']:.0f} px wide cell ({cell['label']})"
                assert cell["text"] or cell["h"] < 40, f"{path}: a blank band {cell['h']:.0f} px tall"
        # Job Details: the story (what happened, what was decided) is on the first screen
        await page.goto(base + "/dashboard/jobs/4242/attempts/0")
        story = await page.evaluate("document.getElementById('story').getBoundingClientRect().bottom")
        assert story <= 844, f"the story ends at {story:.0f} px"
        # a card's evidence has its label (dashboard.js copies the column heading) and reads first-class
        evidence = page.locator("#anomalies td.evidence").first
        assert await evidence.get_attribute("data-label") == "Evidence"
        await page.screenshot(path=str(screenshots / "phone-job-390.png"), full_page=True)
        # the home page: "Needs you" on the first screen
        await page.goto(base + "/dashboard/")
        needs = await page.evaluate("document.getElementById('needs-title').getBoundingClientRect().top")
        assert needs < 844
        await page.screenshot(path=str(screenshots / "phone-home-390.png"), full_page=True)
        await phone.close()

        desk = await chromium.new_context(viewport={"width": 1440, "height": 900})
        wide = await desk.new_page()
        await wide.goto(base + "/dashboard/workflow")
        assert await wide.evaluate(OVERFLOW) <= 0
        table = await wide.evaluate("document.getElementById('workflow-table').getBoundingClientRect().width")
        assert table <= 1440
        line = await wide.evaluate(
            "document.querySelector('#workflow-table tr.story-row td').getBoundingClientRect().width"
        )
        assert line >= 0.8 * table, f"the story line is {line:.0f} of {table:.0f} px"
        # colours: a TERMINATE is not a green success; observe-only Advice is not the orange "waiting" look
        await wide.goto(f"{base}/dashboard/jobs/{STOPPED}/attempts/0")
        stopped = await wide.evaluate("getComputedStyle(document.querySelector('#advice .disp')).color")
        await wide.goto(f"{base}/dashboard/jobs/{OBSERVED}/attempts/0")
        observed = await wide.evaluate("getComputedStyle(document.querySelector('#advice .disp')).color")
        assert stopped == "rgb(153, 27, 27)" and observed == "rgb(91, 33, 182)", (stopped, observed)
        await desk.close()
