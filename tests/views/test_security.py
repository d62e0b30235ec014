"""Dashboard security: CSP without inline code, no anonymous access, CSRF on operator actions, roles, dev banner."""

from __future__ import annotations

import json
import re

import httpx
import pytest
from sqlalchemy import select
from starlette.routing import Mount, Route

from app.advice.models import Advice
from app.audit.models import AuditEvent
from app.infra.context import AppContext
from app.main import create_app
from tests.factories import seed_history
from tests.views.helpers import dashboard_settings, open_client
from tests.views.html import parse

PUBLIC = {"/dashboard/auth/login", "/dashboard/auth/callback", "/dashboard/auth/logout"}


def _pages(seeded) -> list[str]:
    j = seeded.slurm_job_id
    return [
        "/dashboard/workflow",
        f"/dashboard/workflow/{seeded.workflow_id}",
        f"/dashboard/jobs/{j}",
        f"/dashboard/jobs/{j}/attempts/0",
        f"/dashboard/jobs/{j}/attempts/1/timeline",
        f"/dashboard/attempts/{seeded.attempt_uuids[0]}",
        "/dashboard/audit?job=4242/0",
        "/dashboard/advice?show=all",
        "/dashboard/jobs/1",
        "/dashboard/audit?job=bad",
    ]


async def test_pages_send_csp_and_contain_no_inline_script_or_style(operator, sessions) -> None:
    seeded = await seed_history(sessions)
    for path in _pages(seeded):
        response = await operator.get(path)
        csp = response.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "style-src 'self'" in csp and "unsafe-inline" not in csp
        doc = parse(response.text)
        for script in doc.find_all("script"):
            assert script.attrs.get("src") and not script.text.strip(), f"inline script on {path}"
        assert not doc.find_all("style"), path
        offenders = [n.tag for n in doc.iter() if "style" in n.attrs or any(a.startswith("on") for a in n.attrs)]
        assert not offenders, f"{path}: inline style/handler attributes on {offenders}"
        assert not re.search(r"hx-on|javascript:", response.text), path


def _dashboard_routes(app) -> list[tuple[str, set[str]]]:
    found = []
    for route in app.routes:
        if isinstance(route, Mount) and route.path == "/dashboard":
            for child in route.routes:
                if isinstance(child, Route):
                    found.append(("/dashboard" + child.path, set(child.methods or {"GET"})))
    return found


async def test_every_dashboard_route_refuses_anonymous_callers(anonymous, database, settings, stub_tokens) -> None:
    configured = dashboard_settings(settings)
    app = create_app(
        configured, ctx=AppContext(settings=configured, engine=database.engine, sessions=database.sessions)
    )
    routes = _dashboard_routes(app)
    assert len(routes) >= 14
    fill = {
        "{workflow_id:int}": "1",
        "{job_id:int}": "1",
        "{attempt_index:int}": "0",
        "{uuid}": "0b0e4f6e-1111-5222-8333-444455556666",
        "{advice_id:int}": "1",
        "{action}": "approve",
    }
    checked = 0
    for template, methods in routes:
        path = template
        for key, value in fill.items():
            path = path.replace(key, value)
        if template in PUBLIC:
            continue
        for method in methods - {"HEAD"}:
            browser = await anonymous.request(method, path, follow_redirects=False)
            htmx = await anonymous.request(method, path, headers={"HX-Request": "true"}, follow_redirects=False)
            stream = await anonymous.request(
                method, path, headers={"Accept": "text/event-stream"}, follow_redirects=False
            )
            if method == "GET":
                assert browser.status_code == 303 and browser.headers["location"].startswith(
                    "/dashboard/auth/login?next="
                ), path
            else:
                assert browser.status_code == 401, path
            assert htmx.status_code == 401 and stream.status_code == 401, path
            checked += 1
    assert checked >= 12
    # a forged bearer token is refused too
    forged = await anonymous.get("/dashboard/workflow", headers={"Authorization": "Bearer forged"})
    assert forged.status_code == 401


async def test_operator_actions_need_csrf_and_the_operator_role(database, settings, stub_tokens, sessions) -> None:
    seeded = await seed_history(sessions)
    dev = dashboard_settings(settings, dev_no_auth=True)  # cookie-style session: CSRF applies
    app = create_app(dev, ctx=AppContext(settings=dev, engine=database.engine, sessions=database.sessions))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://127.0.0.1",
        headers={"Origin": "http://127.0.0.1"},  # as a browser sends it with every POST
    ) as browser:
        page = parse((await browser.get("/dashboard/advice")).text)
        token = page.find("meta", name="csrf-token").attrs["content"]
        row = page.by_id(f"advice-{seeded.advice_id}")
        form = row.find("form")
        assert form.find("input", type="hidden").attrs["value"] == token
        url = f"/dashboard/advice/{seeded.advice_id}/approve"
        assert (await browser.post(url)).status_code == 403
        assert (await browser.post(url, data={"csrf_token": "wrong" * 8})).status_code == 403
        assert (await browser.post(url, headers={"X-CSRF-Token": "x" * 43})).status_code == 403
        done = await browser.post(url, data={"csrf_token": token}, follow_redirects=False)
        assert done.status_code == 303
        fragment = await browser.post(
            f"/dashboard/advice/{seeded.advice_id}/veto",
            headers={"X-CSRF-Token": token, "HX-Request": "true"},
            data={"reason": "", "confirm": "yes"},  # htmx adds confirm=yes once hx-confirm was accepted
        )
        # the refusal reaches the page's #action-results (outside the live table) through HX-Trigger
        result = json.loads(fragment.headers["HX-Trigger"])["recovery:action-result"]
        assert fragment.status_code == 200 and result["failed"] is True
        assert "a veto needs a reason" in result["message"]
    async with sessions() as session:
        advice = await session.get(Advice, seeded.advice_id)
        event = await session.scalar(select(AuditEvent).where(AuditEvent.event_type == "advice.approved"))
    assert advice.review == "APPROVED" and advice.reviewed_by == "dev" and event.actor == "dev"


async def test_viewer_sees_no_operator_actions_and_cannot_perform_them(viewer, operator, sessions) -> None:
    seeded = await seed_history(sessions)
    as_viewer = parse((await viewer.get("/dashboard/advice")).text)
    assert not as_viewer.find_all("form", method="post") or all(
        "logout" in f.attrs["action"] for f in as_viewer.find_all("form", method="post")
    )
    assert not as_viewer.find_all("td", class_="operator-actions")
    refused = await viewer.post(f"/dashboard/advice/{seeded.advice_id}/approve", data={"csrf_token": "x"})
    assert refused.status_code == 403 and "operator role" in refused.text
    as_operator = parse((await operator.get("/dashboard/advice")).text)
    buttons = [b.text for b in as_operator.by_id(f"advice-{seeded.advice_id}").find_all("button")]
    assert buttons == ["Approve", "Veto", "Re-run reconciliation"]
    # a bearer caller (a script) needs no CSRF token: no browser can attach its header cross-site
    rerun = await operator.post(f"/dashboard/advice/{seeded.advice_id}/rerun", headers={"HX-Request": "true"})
    said = json.loads(rerun.headers["HX-Trigger"])["recovery:action-result"]["message"]
    assert rerun.status_code == 200 and f"Reconciliation of Advice {seeded.advice_id} (RESTART 4242/0)" in said
    async with sessions() as session:
        event = await session.scalar(select(AuditEvent).where(AuditEvent.event_type == "advice.reconcile_requested"))
    assert event.actor == "otto"
    unknown = await operator.post("/dashboard/advice/999999/approve")
    assert unknown.status_code == 404


async def test_dev_mode_shows_a_banner(database, settings) -> None:
    async with await open_client(
        database, dashboard_settings(settings, dev_no_auth=True, oidc_issuer=""), token=None
    ) as client:
        doc = parse((await client.get("/dashboard/workflow")).text)
    assert "Authentication is off" in doc.by_id("dev-banner").text


@pytest.mark.parametrize("target", ["https://evil.example/x", "//evil.example", "/dashboard/workflow?x=1"])
def test_login_next_is_local_only(target: str) -> None:
    from views.auth import safe_next

    assert safe_next(target) == (target if target.startswith("/dashboard") else None)


async def test_session_cookie_is_scoped_httponly_lax_and_secure_on_https(database, settings) -> None:
    dev = dashboard_settings(settings, dev_no_auth=True, oidc_issuer="")
    app = create_app(dev, ctx=AppContext(settings=dev, engine=database.engine, sessions=database.sessions))
    for base, secure in (("http://127.0.0.1", False), ("https://127.0.0.1", True)):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=base) as client:
            cookie = (await client.get("/dashboard/workflow")).headers["set-cookie"].lower()
        assert (
            "recovery_dashboard=" in cookie
            and "httponly" in cookie
            and "samesite=lax" in cookie
            and "path=/dashboard" in cookie
        )
        assert ("secure" in cookie.replace("samesite", "")) is secure
