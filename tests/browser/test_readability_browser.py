"""Phone width, keyboard, tooltips, the timeline's layout and GraphiQL offline, in real Chromium.

SQLite and dev mode only (no login provider needed): the pages and their data are covered on both backends by
tests/views; this test is about what a browser lays out and runs.
"""

from __future__ import annotations

from typing import Any

import pytest

from app.audit import service as audit
from app.infra.config import Settings
from app.infra.context import AppContext
from app.main import create_app
from tests.browser.pages_seed import OVERFLOW, seed_pages
from tests.views.server import free_port, serve

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.parametrize("database", ["sqlite"], indirect=True),
]

# Pairs of <text> boxes of one timeline row that intersect (as the browser drew them).
OVERLAPS = """() => {
  const hits = [];
  for (const row of document.querySelectorAll('svg.timeline g.row')) {
    const boxes = [...row.querySelectorAll('text')].map(t => [t.textContent, t.getBoundingClientRect()]);
    for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
      const [a, r] = boxes[i], [b, s] = boxes[j];
      if (r.left < s.right - 0.5 && s.left < r.right - 0.5 && r.top < s.bottom - 0.5 && s.top < r.bottom - 0.5)
        hits.push(a + ' / ' + b);
    }
  }
  return hits;
}"""


async def test_phone_width_keyboard_timeline_and_graphiql_offline(
    chromium, database, sessions, tmp_path, screenshots
) -> None:
    seeded = await seed_pages(sessions, tmp_path / "train.out")
    settings = Settings.build(
        database_url=database.url,
        data_dir=str(tmp_path),
        cluster="test",
        environment="test-env",
        dev_no_auth=True,
        oidc_issuer="",
    )
    app = create_app(settings, ctx=AppContext(settings=settings, engine=database.engine, sessions=database.sessions))
    async with serve(app, free_port()) as base:
        phone = await chromium.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
        external: list[str] = []

        async def local_only(route: Any) -> None:
            if route.request.url.startswith(base):
                await route.continue_()
            else:
                external.append(route.request.url)
                await route.abort()

        await phone.route("**/*", local_only)
        page = await phone.new_page()
        problems: list[str] = []
        page.on("console", lambda msg: problems.append(msg.text) if msg.type == "error" else None)
        pages = [
            "/dashboard/workflow",
            f"/dashboard/workflow/{seeded.workflow_id}",
            "/dashboard/jobs/4242",
            "/dashboard/jobs/4242/attempts/0",
            "/dashboard/jobs/4242/attempts/0/timeline",
            "/dashboard/audit",
            "/dashboard/advice",
            "/dashboard/not-enrolled",
            "/dashboard/glossary",
            f"/dashboard/jobs/4242/attempts/0/log?path={tmp_path / 'train.out'}&line=200",
        ]
        for path in pages:
            await page.goto(base + path)
            assert await page.evaluate(OVERFLOW) <= 0, f"{path} is wider than 390 px"
        await page.screenshot(path=str(screenshots / "readability-log-390.png"), full_page=True)

        # The timeline on a phone: it scrolls inside its box, its text stays legible, no two labels touch.
        await page.goto(base + "/dashboard/jobs/4242/attempts/0/timeline")
        assert await page.evaluate(OVERFLOW) <= 0
        tick_px = await page.evaluate(
            "document.querySelector('svg.timeline g.tick text').getBoundingClientRect().height"
        )
        assert tick_px >= 10, f"timeline text is {tick_px:.1f} px high on a phone"
        assert await page.evaluate(OVERLAPS) == []
        assert await page.locator("svg.timeline g.silence").count() == 1
        await page.screenshot(path=str(screenshots / "readability-timeline-390.png"), full_page=True)
        # A mark is a keyboard stop that leads to its event row.
        mark = page.locator("svg.timeline a.mark-link").first
        await mark.focus()
        await page.keyboard.press("Enter")
        anchor = await page.evaluate("location.hash")
        assert anchor.startswith("#ev-")
        assert await page.evaluate(f"document.querySelector('{anchor}').matches(':target')")

        # Keyboard: the first Tab reaches the skip link, which moves focus to the content.
        await page.goto(base + "/dashboard/jobs/4242/attempts/0")
        await page.keyboard.press("Tab")
        assert await page.evaluate("document.activeElement.className") == "skip-link"
        await page.keyboard.press("Enter")
        assert await page.evaluate("document.activeElement.id") == "main"
        # A tapped glossary word shows its meaning; the local-time toggle shows local times without hover.
        term = page.locator("button.gloss-term", has_text="generation").first
        await term.tap()
        tip = await term.evaluate("el => getComputedStyle(el, '::after').content")
        assert "revision of the Advice" in tip
        local = page.locator(".local-time").first
        assert not await local.is_visible()
        await page.click("#local-toggle")
        assert await local.is_visible() and "local" in await local.inner_text()
        await page.reload()
        assert await page.locator(".local-time").first.is_visible()  # remembered
        assert await page.evaluate(OVERFLOW) <= 0

        # Desktop timeline: still no overlapping labels at full width.
        desk = await chromium.new_context(viewport={"width": 1440, "height": 900})
        await desk.route("**/*", local_only)
        wide = await desk.new_page()
        await wide.goto(base + "/dashboard/jobs/4242/attempts/1/timeline")
        assert await wide.evaluate(OVERLAPS) == []
        await wide.screenshot(path=str(screenshots / "readability-timeline-1440.png"), full_page=True)

        # Audit Events update live: a new event appears on the first page without a reload.
        await wide.goto(base + "/dashboard/audit?event_type=checkpoint.")
        await wide.wait_for_function("() => document.body.getAttribute('data-live') === 'sse'", timeout=10000)
        async with sessions() as session, session.begin():
            event = await audit.record(
                session,
                component="watcher",
                event_type="checkpoint.loaded",
                level="INFO",
                message="loaded checkpoint iteration 1200",
                cluster="test",
                slurm_job_id=4242,
                attempt_index=1,
            )
        assert event is not None  # written at once (no audit.batched block)
        await wide.wait_for_selector(f'tr[data-event-id="{event.id}"]', timeout=15000)
        assert "checkpoint.loaded" in await wide.inner_text("#audit-results")

        # GraphiQL from vendored files, with every non-local request refused: it renders a query result.
        graphiql = await wide.goto(base + "/graphql")
        assert graphiql is not None and graphiql.status == 200
        await wide.wait_for_selector(".graphiql-container .graphiql-execute-button", timeout=20000)
        await wide.click(".graphiql-execute-button")
        await wide.wait_for_function(
            "() => { const el = document.querySelector('.result-window'); "
            "return !!el && el.innerText.includes('latestState'); }",
            timeout=20000,
        )
        result = await wide.inner_text(".result-window")
        assert '"data"' in result and "llama" in result, result[:400]
        await wide.screenshot(path=str(screenshots / "readability-graphiql.png"))
        await desk.close()
        await phone.close()
    assert external == [], external
    refused = [p for p in problems if "Content Security Policy" in p or "Refused" in p]
    assert refused == [], refused
