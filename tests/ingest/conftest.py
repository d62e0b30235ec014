"""Fixtures of the push-ingest tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.infra.context import AppContext
from tests.api.helpers import LiveServer, stop_server
from tests.ingest.helpers import push_server
from tests.plugins.database import Database


@pytest.fixture
def server(database: Database, ctx: AppContext, tmp_path: Path) -> Iterator[LiveServer]:
    """A running `recovery serve` taking pushes on the test's database (a module may define its own)."""
    live = push_server(database.url, tmp_path, ctx.settings.cluster)
    try:
        yield live
    finally:
        stop_server(live)
