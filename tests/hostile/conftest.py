"""Fixture of the hostile suite: a real `recovery serve` (OIDC mode, the real provider) with seeded data, tokens
and a dashboard session."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from tests.api.helpers import start_server, stop_server
from tests.hostile.helpers import Target, dashboard_login, seed_world, write_invalid_utf8
from tests.plugins.database import Database
from tests.plugins.oidc_provider import OidcProvider


@pytest.fixture
async def target(
    oidc_provider: OidcProvider, database: Database, tmp_path: Path, sessions: async_sessionmaker[AsyncSession]
) -> AsyncIterator[Target]:
    seeded = await seed_world(sessions)
    if database.backend == "sqlite":
        write_invalid_utf8(database, seeded)
    server = start_server(
        database.url,
        tmp_path,
        RECOVERY_OIDC_ISSUER=oidc_provider.issuer,
        RECOVERY_OIDC_AUDIENCE=oidc_provider.audience,
        RECOVERY_OIDC_CLIENT_ID=oidc_provider.dashboard_client_id,
        RECOVERY_SESSION_SECRET="h" * 40,
    )
    try:
        tokens = {
            "viewer": oidc_provider.token("viewer-client"),
            "operator": oidc_provider.token("operator-client"),
            "norole": oidc_provider.token("norole-client"),
        }
        cookie = dashboard_login(server, oidc_provider, "operator-olga")
        yield Target(server, oidc_provider, tokens, cookie, seeded, database.backend)
    finally:
        stop_server(server)
