"""GraphiQL usable on a phone and the log link opening with the lines before the evidence in view (issue 26).

Real Chromium at 390×844 (and 1440×900 for the log), SQLite and dev mode: what is tested is what the browser lays out.
"""

from __future__ import annotations

from typing import Any

import pytest

from app.infra.config import Settings
from app.infra.context import AppContext
from app.main import create_app
from tests.browser.pages_seed import OVERFLOW, seed_pages
from tests.factories import read_log_source
from tests.views.server import free_port, serve

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.parametrize("database", ["sqlite"], indirect=True),
]

# Where a box lies on the screen: [left, top, right, bottom] (CSS px of the viewport).
BOX = "el => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; }"


def _app(database: Any, tmp_path: Any) -> Any:
    settings = Settings.build(
        database_url=database.url,
        data_dir=str(tmp_path),
        cluster="test",
        environment="test-env",
        dev_no_auth=True,
        oidc_issuer="",
    )
    return create_app(settings, ctx=AppContext(settings=settings, engine=database.engine, sessions=database.sessions))


async def test_graphiql_is_linked_and_usable_at_phone_width(chromium, database, sessions, tmp_path, screenshots):
    await seed_pages(sessions, tmp_path / "train.out")
    async with serve(_app(database, tmp_path), free_port()) as base:
        phone = await chromium.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
        page = await phone.new_page()
        await page.goto(base + "/dashboard/")
        link = page.locator("#graphiql-link")
        assert await link.is_visible()
        await link.tap()
        await page.wait_for_selector(".graphiql-container .graphiql-execute-button", timeout=20000)
        assert await page.evaluate(OVERFLOW) <= 0, "GraphiQL is wider than 390 px"
        await page.screenshot(path=str(screenshots / "graphiql-390.png"))
        editor = await page.locator(".graphiql-query-editor").first.evaluate(BOX)
        assert editor[2] - editor[0] >= 250, f"the query editor is {editor[2] - editor[0]:.0f} px wide"
        execute = page.locator(".graphiql-execute-button")
        box = await execute.evaluate(BOX)
        assert 0 <= box[0] and box[2] <= 390 and 0 <= box[1] and box[3] <= 844, box
        await execute.tap()
        await page.wait_for_function(
            "() => { const el = document.querySelector('.result-window'); "
            "return !!el && el.innerText.includes('latestState'); }",
            timeout=20000,
        )
        result = await page.locator(".result-window").first.evaluate(BOX)
        assert result[2] - result[0] >= 250, f"the result is {result[2] - result[0]:.0f} px wide"
        assert result[0] >= 0 and result[2] <= 390, result
        await page.screenshot(path=str(screenshots / "graphiql-390-result.png"))
        await phone.close()


@pytest.mark.parametrize("viewport", [(390, 844), (1440, 900)])
async def test_the_log_link_opens_with_lines_before_the_evidence_in_view(
    chromium, database, sessions, tmp_path, screenshots, viewport
):
    seeded = await seed_pages(sessions, tmp_path / "train.out")  # the hang's evidence is line 200 of a 399-line log
    await read_log_source(sessions, attempt_id=seeded.attempt_ids[0], path=str(tmp_path / "train.out"))
    width, height = viewport
    async with serve(_app(database, tmp_path), free_port()) as base:
        context = await chromium.new_context(viewport={"width": width, "height": height})
        page = await context.new_page()
        await page.goto(base + "/dashboard/jobs/4242/attempts/0")
        link = page.locator("a.log-link").first
        await link.scroll_into_view_if_needed()
        await link.click()
        await page.wait_for_selector("tr#L200.target")
        await page.wait_for_function("() => location.hash === '#L200'")
        target = await page.locator("tr#L200").evaluate(BOX)
        assert height * 0.15 <= target[1] <= height * 0.8, f"the evidence line is at {target[1]:.0f} px of {height}"
        for before in (195, 197, 199):  # the lines before it are on screen, not scrolled away above
            row = await page.locator(f"tr#L{before}").evaluate(BOX)
            assert 0 <= row[1] and row[3] <= target[1] + 1, (before, row, target)
        await page.screenshot(path=str(screenshots / f"log-link-{width}.png"))
        await context.close()
