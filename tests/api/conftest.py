"""Fixtures of the API tests: seeded data, an in-process client, a real uvicorn server, and GraphQL helpers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from app.infra.config import Settings
from app.infra.context import AppContext
from app.main import create_app
from tests.api.helpers import FakeAuthenticator, LiveServer, start_server, stop_server
from tests.factories import CLUSTER
from tests.plugins.database import Database


@pytest.fixture
def api_settings(database: Database, tmp_path: Path) -> Settings:
    """Settings of the in-process app: dev mode (the dev principal is viewer and operator)."""
    return Settings.build(
        database_url=database.url, data_dir=str(tmp_path), cluster=CLUSTER, environment="test-env", dev_no_auth=True
    )


@pytest.fixture
async def client(database: Database, api_settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client of the app in this process (dev auth)."""
    ctx = AppContext(settings=api_settings, engine=database.engine, sessions=database.sessions)
    app = create_app(api_settings, ctx=ctx)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as http:
        yield http


@pytest.fixture
async def token_client(
    database: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client of an app that knows the tokens `viewer-token` and `operator-token` (FakeAuthenticator)."""
    monkeypatch.setattr("app.infra.context.process_authenticator", lambda settings: FakeAuthenticator())
    settings = Settings.build(
        database_url=database.url, data_dir=str(tmp_path), cluster=CLUSTER, oidc_issuer="https://idp.invalid"
    )
    ctx = AppContext(settings=settings, engine=database.engine, sessions=database.sessions)
    app = create_app(settings, ctx=ctx)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api.test") as http:
        yield http


# ---- data --------------------------------------------------------------------------------------


# ---- a real server -----------------------------------------------------------------------------


@pytest.fixture
def live_server(database: Database, tmp_path: Path) -> Iterator[LiveServer]:
    """A real uvicorn (`recovery serve`, dev auth on loopback) on the test database."""
    server = start_server(database.url, tmp_path, RECOVERY_DEV_NO_AUTH="true")
    try:
        yield server
    finally:
        stop_server(server)
