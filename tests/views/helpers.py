"""Helpers of the dashboard tests: tokens that map to viewer/operator principals, settings, an in-process client."""

from __future__ import annotations

from typing import Any

import httpx

from app.auth import OPERATOR, VIEWER, AuthError, Principal
from app.infra.config import Settings
from app.infra.context import AppContext
from app.main import create_app

VIEWER_TOKEN = "viewer-token"


OPERATOR_TOKEN = "operator-token"


PRINCIPALS = {
    VIEWER_TOKEN: Principal(subject="u-viewer", name="vera", email=None, roles=frozenset({VIEWER})),
    OPERATOR_TOKEN: Principal(subject="u-operator", name="otto", email=None, roles=frozenset({VIEWER, OPERATOR})),
}


class StubVerifier:
    """Stands in for TokenVerifier: two known tokens, everything else refused like a bad token."""

    requires_token = True

    async def verify(self, token: str) -> Principal:
        if token not in PRINCIPALS:
            raise AuthError(401, "token signature is invalid")
        return PRINCIPALS[token]

    async def aclose(self) -> None:
        return None


def dashboard_settings(settings: Settings, **overrides: Any) -> Settings:
    values = {f: getattr(settings, f) for f in settings.__dataclass_fields__}
    values.update(
        {"oidc_issuer": "http://issuer.invalid", "oidc_client_id": "recovery-dashboard", "session_secret": "s" * 32}
    )
    values.update(overrides)
    return Settings.build(**values)


async def open_client(database: Any, settings: Settings, token: str | None = VIEWER_TOKEN) -> httpx.AsyncClient:
    ctx = AppContext(settings=settings, engine=database.engine, sessions=database.sessions)
    app = create_app(settings, ctx=ctx)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1", headers=headers)
