"""Nothing answers without a token: every route of the app (walked recursively) and every GraphQL root field."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from app.api.schema import schema
from app.infra.config import Settings
from app.main import create_app
from graphql import GraphQLNonNull, Undefined, get_named_type, is_leaf_type

# /v1/openapi.json describes the REST API and holds no data (docs/bad-input.md).
OPEN_PATHS = {"/healthz", "/readyz", "/v1/openapi.json"}
# The dashboard's sign-in flow is how a browser gets authenticated; it serves no data.
SIGN_IN_PATHS = {"/dashboard/auth/login", "/dashboard/auth/callback", "/dashboard/auth/logout"}
DUMMY = {"Int": "1", "String": '"x"', "ID": '"QXR0ZW1wdDox"', "Boolean": "false", "DateTime": '"2025-01-01T00:00:00Z"'}


def _app(tmp_path: Path, **overrides: object):
    values: dict[str, object] = {
        "oidc_issuer": "https://idp.example.invalid",
        "oidc_client_id": "recovery-dashboard",
        **overrides,
    }
    settings = Settings.build(database_url=f"sqlite+aiosqlite:///{tmp_path}/auth.db", data_dir=str(tmp_path), **values)
    return create_app(settings)


def walk(routes: list[BaseRoute], prefix: str = "") -> Iterator[tuple[str, BaseRoute]]:
    """(full path, route) of every endpoint, through mounts."""
    for route in routes:
        if isinstance(route, Mount):
            yield from walk(list(route.routes), prefix + route.path)
        else:
            yield prefix + getattr(route, "path", ""), route


def _concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "1", path)


def _root_operations() -> Iterator[tuple[str, str]]:
    for kind, root in (
        ("query", schema._schema.query_type),
        ("mutation", schema._schema.mutation_type),
        ("subscription", schema._schema.subscription_type),
    ):
        assert root is not None
        for name, field in root.fields.items():
            args = ", ".join(
                f"{arg}: {DUMMY[get_named_type(a.type).name]}"
                for arg, a in field.args.items()
                if isinstance(a.type, GraphQLNonNull) and a.default_value is Undefined
            )
            selection = "" if is_leaf_type(get_named_type(field.type)) else " { __typename }"
            yield f"{kind}.{name}", f"{kind} {{ {name}{f'({args})' if args else ''}{selection} }}"


@pytest.mark.parametrize("prefix", ["", "/mission-control/recovery-engine-api"])
def test_every_route_refuses_requests_without_a_token(tmp_path: Path, prefix: str) -> None:
    app = _app(tmp_path, url_prefix=prefix)
    routes = list(walk(list(app.routes)))
    assert any(path.endswith("/graphql") for path, _ in routes) and any("/v1/" in path for path, _ in routes)
    checked = 0
    with TestClient(app, raise_server_exceptions=True) as http:
        for path, route in routes:
            url = _concrete(path)
            if path.removeprefix(prefix) in OPEN_PATHS | SIGN_IN_PATHS:
                continue
            if isinstance(route, WebSocketRoute):
                with http.websocket_connect(url, subprotocols=["graphql-transport-ws"]) as ws:
                    ws.send_json({"type": "connection_init", "payload": {}})
                    with pytest.raises(WebSocketDisconnect) as closed:
                        ws.receive_json()
                assert closed.value.code == 4401, (path, closed.value)
                checked += 1
                continue
            assert isinstance(route, Route)
            for method in sorted((route.methods or {"GET"}) - {"HEAD"}):
                response = http.request(
                    method, url, json={"query": "{ __typename }"} if method == "POST" else None, follow_redirects=False
                )
                if response.status_code == 303:  # a dashboard page sends a browser to sign in, showing nothing
                    assert "/dashboard/auth/login" in response.headers["location"], (method, path, response.headers)
                else:
                    assert response.status_code == 401, (method, path, response.status_code, response.text[:200])
                    assert response.headers["www-authenticate"].startswith("Bearer")
                checked += 1
    assert checked >= 6


def test_only_health_checks_are_open(tmp_path: Path) -> None:
    with TestClient(_app(tmp_path)) as http:
        assert http.get("/healthz").status_code == 200
        assert http.get("/readyz").status_code in (200, 503)  # answers (503: this database is not migrated)
        # GraphiQL is for authenticated users too.
        assert http.get("/graphql", headers={"Accept": "text/html"}).status_code == 401


@pytest.mark.parametrize(("name", "document"), list(_root_operations()), ids=lambda v: v if "." in str(v) else "")
def test_every_graphql_root_field_needs_a_token(tmp_path: Path, name: str, document: str) -> None:
    with TestClient(_app(tmp_path)) as http:
        response = http.post("/graphql", json={"query": document})
        assert response.status_code == 401, (name, response.text)
        assert response.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
        if name.startswith("query."):
            assert http.get("/graphql", params={"query": document}).status_code == 401
        bad_token = http.post("/graphql", json={"query": document}, headers={"Authorization": "Basic dXNlcjpwdw=="})
        assert bad_token.status_code == 401
        if name.startswith("subscription."):
            with http.websocket_connect("/graphql", subprotocols=["graphql-transport-ws"]) as ws:
                # Subscribing before connection_init is refused by the protocol itself...
                ws.send_json({"type": "subscribe", "id": "1", "payload": {"query": document}})
                with pytest.raises(WebSocketDisconnect) as closed:
                    ws.receive_json()
                assert closed.value.code == 4401


def test_graphiql_is_served_to_authenticated_users(tmp_path: Path) -> None:
    with TestClient(_app(tmp_path, dev_no_auth=True, oidc_issuer=""), base_url="http://127.0.0.1") as http:
        page = http.get("/graphql", headers={"Accept": "text/html"})
        assert page.status_code == 200 and "graphiql" in page.text.lower()
        csp = page.headers["content-security-policy"]
        # Vendored assets under the dashboard's own policy: no CDN, no inline script.
        assert "unpkg" not in page.text and "unpkg" not in csp and "'unsafe-inline'" not in csp
        assert "/static/graphiql-3.8.3.min.js" in page.text and "<script>" not in page.text
