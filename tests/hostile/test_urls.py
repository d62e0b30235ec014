"""Job-controlled workflow ids in dashboard URLs (issue 22), against a real `recovery serve`: every link, redirect
and htmx `hx-get` names the same workflow it was made for, whatever characters its id holds."""

from __future__ import annotations

import html
import re
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.api.helpers import LiveServer, start_server, stop_server
from tests.factories import seed_job
from tests.plugins.database import Database
from views.urls import url_segment

# Each would, unencoded, name another page: a query, a fragment, a second path segment, the parent of /dashboard,
# a header line, an already-encoded id.
HOSTILE_IDS = (
    "wf?x=1",
    "wf#top",
    "wf%2Fother",
    "a/b",
    "../../v1/installation",
    "..",
    ".",
    "wf\r\nSet-Cookie: a=b",
    "100%",
    "wf with spaces&more=1",
)


@pytest.fixture
async def server(database: Database, tmp_path: Path) -> AsyncIterator[LiveServer]:
    async with database.sessions() as session, session.begin():
        for n, key in enumerate(HOSTILE_IDS):
            await seed_job(session, slurm_job_id=700 + n, workflow_key=key)
    live = start_server(database.url, tmp_path, RECOVERY_DEV_NO_AUTH="true")
    try:
        yield live
    finally:
        stop_server(live)


def _shown_key(page: httpx.Response) -> str:
    """The workflow id a workflow page is about (its heading)."""
    match = re.search(r"<h1[^>]*>(.*?)</h1>", page.text, re.S)
    assert match, page.text[:500]
    return html.unescape(re.sub(r"<[^>]+>", "", match.group(1)))


def _workflow_links(page: httpx.Response) -> dict[str, str]:
    """{workflow id: href} of the Overview's table (each workflow's story line links its id)."""
    found = {}
    for href, text in re.findall(r'<a class="workflow-key" href="([^"]*)">([^<]*)</a>', page.text):
        if "/dashboard/workflow/" in html.unescape(href):
            found[html.unescape(text)] = html.unescape(href)
    return found


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_every_link_redirect_and_hx_get_names_the_same_workflow(server: LiveServer) -> None:
    with httpx.Client(base_url=server.url, timeout=20, follow_redirects=False) as client:
        overview = client.get("/dashboard/workflow", params={"first": "50"})
        assert overview.status_code == 200
        links = _workflow_links(overview)
        for key in HOSTILE_IDS:
            href = links.get(key)
            assert href is not None, (key, sorted(links))
            assert "\r" not in href and "\n" not in href and "#" not in href.split("?")[0], href
            page = client.get(href)
            assert page.status_code == 200, (key, href, page.status_code)
            assert _shown_key(page).split() == ["Workflow", *key.split()], (key, href)
            # the page reloads itself (htmx) from the same URL
            reload = re.search(r'hx-get="([^"]*)"', page.text)
            assert reload, page.text[:300]
            again = client.get(html.unescape(reload.group(1)), headers={"HX-Request": "true"})
            assert again.status_code == 200 and "Unknown workflow" not in again.text, (key, reload.group(1))
            # the jump box redirects to it
            jump = client.get("/dashboard/go", params={"q": key})
            if jump.status_code == 303:
                target = jump.headers["location"]
                assert "\r" not in target and "\n" not in target
                landed = client.get(target)
                assert landed.status_code == 200 and "Unknown workflow" not in landed.text, (key, target)
                assert not urllib.parse.urlsplit(target).path.startswith("/v1"), target


def test_the_one_helper_encodes_every_character_that_would_change_the_url() -> None:
    for key in HOSTILE_IDS:
        segment = url_segment(key)
        assert not set(segment) & set("/?#\r\n &"), segment
        assert urllib.parse.unquote(segment) == key
    assert url_segment("wf%2Fother") == "wf%252Fother"
