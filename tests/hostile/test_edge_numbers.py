"""Numbers and text from outside through domain/edge/bounds.py (issue 22), against a real `recovery serve`: ASCII digits
only, within int64, no spaces around them, text never cut to fit; a clear 400 (or BAD_USER_INPUT) otherwise."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.helpers import LiveServer, start_server, stop_server
from tests.factories import seed_job
from tests.plugins.database import Database

pytestmark = pytest.mark.parametrize("database", ["sqlite"], indirect=True)


@pytest.fixture
async def server(database: Database, tmp_path: Path) -> AsyncIterator[LiveServer]:
    async with database.sessions() as session, session.begin():
        await seed_job(session, slurm_job_id=3, workflow_key="wf-three", advice=True)
    live = start_server(database.url, tmp_path, RECOVERY_DEV_NO_AUTH="true")
    try:
        yield live
    finally:
        stop_server(live)


@contextlib.contextmanager
def _operator(server: LiveServer) -> Iterator[tuple[httpx.Client, dict[str, str]]]:
    """A dashboard client (dev mode) and what a same-site form post carries: the CSRF token and Origin."""
    with httpx.Client(base_url=server.url, timeout=20, follow_redirects=False) as client:
        page = client.get("/dashboard/nodes")
        assert page.status_code == 200, page.text
        token = page.text.split('name="csrf-token" content="', 1)[1].split('"', 1)[0]
        yield client, {"csrf_token": token, "Origin": server.url.rstrip("/")}


def _post(client: httpx.Client, form: dict[str, str], path: str, **fields: str) -> httpx.Response:
    return client.post(path, data={"csrf_token": form["csrf_token"], **fields}, headers={"Origin": form["Origin"]})


def test_fleet_forms_refuse_numbers_they_cannot_hold_with_400(server: LiveServer) -> None:
    with _operator(server) as (client, form):
        for bad in ("²", "٣", "9" * 30, "9" * 5000, "-1", "1e3", "0x10"):
            released = _post(client, form, "/dashboard/fleet/release", advice_id=bad)
            assert released.status_code == 400 and "advice_id" in released.text, (bad, released.status_code)
            extended = _post(client, form, "/dashboard/fleet/extend", extra=bad, cluster="test")
            assert extended.status_code == 400 and "extra" in extended.text, (bad, extended.status_code)
        # a person may type spaces around the number in the form: those are dropped, the number is read
        fine = _post(client, form, "/dashboard/fleet/extend", extra=" 2 ", cluster="test")
        assert fine.status_code == 303, fine.text
    assert "Traceback" not in server.log() and " 500" not in server.log()


def test_a_node_name_too_long_is_refused_not_cut_and_pinned(server: LiveServer) -> None:
    long_name = "gpu-" + "n" * 300
    with _operator(server) as (client, form):
        pinned = _post(client, form, "/dashboard/fleet/pin", node=long_name, cluster="test")
        assert pinned.status_code == 400 and "node" in pinned.text, pinned.text
        for cut in (long_name[:200], long_name[:256]):
            body = client.post(
                "/graphql", json={"query": "{ nodes { name state } }"}, headers={"Origin": form["Origin"]}
            ).json()
            assert all(n["name"] != cut for n in body["data"]["nodes"]), body
        # the longest name a node column holds is pinned as it is
        exact = "gpu-" + "n" * 252
        assert _post(client, form, "/dashboard/fleet/pin", node=exact, cluster="test").status_code == 303
        body = client.post(
            "/graphql", json={"query": "{ nodes { name state } }"}, headers={"Origin": form["Origin"]}
        ).json()
        assert [n["name"] for n in body["data"]["nodes"]] == [exact], body


def test_non_ascii_digits_and_spaces_are_not_numbers(server: LiveServer) -> None:
    with httpx.Client(base_url=server.url, timeout=20) as client:
        for value in (" 5", "5 ", "٣", "²", "+5", "5" * 40):
            answer = client.get("/v1/workflows", params={"limit": value})
            assert answer.status_code == 400 and answer.json()["error"]["code"] == "INVALID_ARGUMENT", value
        assert client.get("/v1/workflows", params={"limit": "5"}).status_code == 200
        assert client.get("/dashboard/goodput", params={"hours": "٣"}).status_code == 400
        assert client.get("/dashboard/goodput", params={"hours": "24"}).status_code == 200
        assert client.get("/dashboard/live", params={"view": "audit", "job": "٣"}).status_code == 400
        # the not-enrolled search box: '٣' is text, not job 3
        page = client.get("/dashboard/not-enrolled", params={"q": "٣"})
        assert page.status_code == 200
        assert client.get("/v1/audit/events", params={"jobId": "٣"}).status_code == 400


def test_graphql_string_arguments_are_bounded(server: LiveServer) -> None:
    with httpx.Client(base_url=server.url, timeout=20) as client:
        for query in (
            '{ clusters(name: "%s") { name } }' % ("c" * 5000),
            '{ attempt(ref: "%s") { attemptIndex } }' % ("1" * 5000),
        ):
            body = client.post("/graphql", json={"query": query}).json()
            assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT", body
            assert "longer than" in body["errors"][0]["message"], body
        body = client.post("/graphql", json={"query": '{ clusters(name: "test") { name } }'}).json()
        assert "errors" not in body, body
