"""Fixtures for dashboard tests: an app whose bearer tokens map to viewer/operator principals without an issuer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.infra.config import Settings
from tests.views.helpers import OPERATOR_TOKEN, StubVerifier, dashboard_settings, open_client


@pytest.fixture
def stub_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("app.infra.context.process_authenticator", lambda settings: StubVerifier())


@pytest.fixture
async def viewer(database: Any, settings: Settings, stub_tokens: None) -> AsyncIterator[httpx.AsyncClient]:
    async with await open_client(database, dashboard_settings(settings)) as client:
        yield client


@pytest.fixture
async def operator(database: Any, settings: Settings, stub_tokens: None) -> AsyncIterator[httpx.AsyncClient]:
    async with await open_client(database, dashboard_settings(settings), OPERATOR_TOKEN) as client:
        yield client


@pytest.fixture
async def anonymous(database: Any, settings: Settings, stub_tokens: None) -> AsyncIterator[httpx.AsyncClient]:
    async with await open_client(database, dashboard_settings(settings), None) as client:
        yield client
