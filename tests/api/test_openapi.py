"""The committed REST contract: docs/openapi.json is the document the code builds and serves at /v1/openapi.json."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
from starlette.routing import Route

from app.api.openapi import openapi_document, printed_document
from app.api.rest import rest_routes
from app.infra.config import Settings
from app.main import create_app

ROOT = Path(__file__).resolve().parents[2]
OPENAPI_FILE = ROOT / "docs" / "openapi.json"


def test_committed_openapi_document_matches_the_code() -> None:
    assert OPENAPI_FILE.read_text() == printed_document(), (
        "docs/openapi.json drifted from the code: run `.venv/bin/python -m app.api.openapi > docs/openapi.json`"
    )


def test_openapi_printer_command_prints_the_committed_document() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "app.api.openapi"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout == OPENAPI_FILE.read_text()


def test_every_rest_route_is_documented_and_nothing_else() -> None:
    routes = {route.path for route in rest_routes(None, None) if isinstance(route, Route)}  # type: ignore[arg-type]
    documented = {path.removeprefix("/v1") for path in openapi_document()["paths"]}
    assert routes - {"/openapi.json"} == documented


async def test_the_document_is_served_without_a_token(tmp_path: Path) -> None:
    settings = Settings.build(
        database_url=f"sqlite+aiosqlite:///{tmp_path}/o.db", data_dir=str(tmp_path), oidc_issuer="https://idp.invalid"
    )
    app = create_app(settings)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as http:
            served = await http.get("/v1/openapi.json")
            protected = await http.get("/v1/workflows")
    finally:
        await app.state.ctx.close()
    assert served.status_code == 200 and served.json() == json.loads(OPENAPI_FILE.read_text())
    assert served.json()["openapi"].startswith("3.")
    assert protected.status_code == 401
