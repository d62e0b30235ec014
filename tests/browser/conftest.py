"""Browser fixtures: Debian's Chromium driven by Playwright (system browser, never `playwright install`)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.plugins import require

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"


def _unavailable(reason: str) -> None:
    """CI must have the browser (its bootstrap installs Debian's chromium); elsewhere skip and say why."""
    require("the browser (Chromium)", reason)


@pytest.fixture(scope="session")
async def chromium() -> AsyncIterator[Any]:
    """One headless Chromium for the session."""
    if not os.access(CHROMIUM, os.X_OK):
        _unavailable(f"{CHROMIUM} is missing (apt-get install -y --no-install-recommends chromium)")
    try:
        from playwright.async_api import async_playwright
    except ImportError as exc:
        _unavailable(f"the playwright Python package is not installed: {exc}")
    playwright = await async_playwright().start()
    try:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
    except Exception as exc:
        await playwright.stop()
        _unavailable(f"{CHROMIUM} did not start: {exc}")
    try:
        yield browser
    finally:
        await browser.close()
        await playwright.stop()


@pytest.fixture
def screenshots() -> Path:
    """Where screenshots are kept as artefacts (gitignored)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS
