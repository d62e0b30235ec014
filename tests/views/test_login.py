"""Dashboard login through the real OIDC provider: code + PKCE, access token verified, session cookie, logout."""

from __future__ import annotations

import urllib.parse

import httpx
import pytest

from app.infra.context import AppContext
from app.main import create_app
from tests.views.html import parse

# Login and token checks do not depend on the database backend, so these run on SQLite only.
pytestmark = [pytest.mark.oidc, pytest.mark.parametrize("database", ["sqlite"], indirect=True)]


def _app(oidc_provider, database, settings):
    configured = oidc_provider.settings(
        database_url=database.url,
        data_dir=settings.data_dir,
        cluster="test",
        environment="test-env",
        session_secret="x" * 32,
    )
    return create_app(
        configured, ctx=AppContext(settings=configured, engine=database.engine, sessions=database.sessions)
    )


async def _login(
    client: httpx.AsyncClient, oidc_provider, username: str, next_path: str = "/dashboard/advice"
) -> httpx.Response:
    start = await client.get("/dashboard/auth/login", params={"next": next_path})
    assert start.status_code == 302
    authorize = start.headers["location"]
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(authorize).query)
    assert (
        authorize.startswith(oidc_provider.issuer)
        and query["code_challenge_method"] == ["S256"]
        and query["code_challenge"]
    )
    assert query["redirect_uri"] == ["http://127.0.0.1:8000/dashboard/auth/callback"]
    callback = oidc_provider.login(authorize, username)
    return await client.get(callback.replace("http://127.0.0.1:8000", ""))


async def test_login_sets_a_session_with_roles_and_logout_ends_it(oidc_provider, database, settings) -> None:
    app = _app(oidc_provider, database, settings)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8000") as client:
        anonymous = await client.get("/dashboard/advice")
        assert (
            anonymous.status_code == 303
            and anonymous.headers["location"] == "/dashboard/auth/login?next=%2Fdashboard%2Fadvice"
        )
        done = await _login(client, oidc_provider, "operator-otto")
        assert done.status_code == 303 and done.headers["location"] == "/dashboard/advice"
        cookie = done.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=lax" in cookie and "path=/dashboard" in cookie
        page = parse((await client.get("/dashboard/advice")).text)
        user = page.find("span", class_="user")
        assert "operator-otto" in user.text and "operator" in user.find("span", class_="roles").text
        assert page.find("meta", name="csrf-token").attrs["content"]
        # the cookie holds only the session essentials (signed, not encrypted: no tokens in it)
        assert "access_token" not in (await client.get("/dashboard/advice")).request.headers.get("cookie", "")
        token = page.find("meta", name="csrf-token").attrs["content"]
        bye = await client.post(
            "/dashboard/auth/logout", data={"csrf_token": token}, headers={"Origin": "http://127.0.0.1:8000"}
        )
        assert bye.status_code == 200 and "signed out" in bye.text
        assert (await client.get("/dashboard/advice")).status_code == 303


async def test_viewer_login_has_no_operator_role(oidc_provider, database, settings) -> None:
    app = _app(oidc_provider, database, settings)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8000") as client:
        await _login(client, oidc_provider, "vera", "/dashboard/workflow")
        page = parse((await client.get("/dashboard/workflow")).text)
        assert page.find("span", class_="roles").text == "viewer"


async def test_callback_with_a_forged_state_is_explained_not_a_500(oidc_provider, database, settings) -> None:
    app = _app(oidc_provider, database, settings)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8000") as client:
        response = await client.get("/dashboard/auth/callback?code=abc&state=forged")
        assert response.status_code == 400 and "Login failed" in parse(response.text).find("h1").text
        denied = await client.get("/dashboard/auth/callback?error=access_denied&error_description=nope")
        assert denied.status_code == 400 and "access_denied" in denied.text


async def test_bearer_token_from_the_provider_works_on_dashboard_routes(oidc_provider, database, settings) -> None:
    app = _app(oidc_provider, database, settings)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8000") as client:
        ok = await client.get(
            "/dashboard/workflow", headers={"Authorization": f"Bearer {oidc_provider.token('viewer-client')}"}
        )
        assert ok.status_code == 200
        norole = await client.get(
            "/dashboard/workflow", headers={"Authorization": f"Bearer {oidc_provider.token('norole-client')}"}
        )
        assert norole.status_code == 403
