"""Protocol details a hostile client probes (issue 22), against a real `recovery serve`: `Accept-Encoding` q=0 is
honoured, every GraphQL request error carries `extensions.code`, several operations without `operationName` are
the spec's error (over HTTP and WebSocket, never the first one run), and closing a live stream logs no ERROR."""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from tests.api.helpers import LiveServer, start_server, stop_server
from tests.factories import seed_job
from tests.plugins.database import Database

pytestmark = pytest.mark.parametrize("database", ["sqlite"], indirect=True)

TWO_OPERATIONS = "query First { viewer { name } } query Second { clusters { name } }"


@pytest.fixture
async def server(database: Database, tmp_path: Path) -> AsyncIterator[LiveServer]:
    async with database.sessions() as session, session.begin():
        await seed_job(session, slurm_job_id=41, workflow_key="wf-edges", advice=True)
    live = start_server(database.url, tmp_path, RECOVERY_DEV_NO_AUTH="true")
    try:
        yield live
    finally:
        stop_server(live)


def test_accept_encoding_q0_gets_no_gzip(server: LiveServer) -> None:
    with httpx.Client(base_url=server.url, timeout=20) as client:
        page = client.get("/dashboard/workflow")
        script = re.search(r'src="([^"]*dashboard[^"]*\.js)"', page.text)
        assert script, page.text[:500]
        path = script.group(1)
        assert client.get(path, headers={"Accept-Encoding": "gzip"}).headers.get("content-encoding") == "gzip"
        for header in ("gzip;q=0", "*, gzip;q=0", "gzip;q=0, *", "gzip; Q=0.0", "gzip;level=9;q=0", "*;q=0", "br"):
            answer = client.get(path, headers={"Accept-Encoding": header})
            assert answer.status_code == 200 and "content-encoding" not in answer.headers, header


def _graphql(client: httpx.Client, query: str, operation: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"query": query}
    if operation is not None:
        body["operationName"] = operation
    answer = client.post("/graphql", json=body)
    assert answer.status_code in (200, 400), answer.text
    result: dict[str, Any] = answer.json()
    return result


def test_every_graphql_request_error_has_a_code(server: LiveServer) -> None:
    cases = {
        "{ viewer { name }": "GRAPHQL_PARSE_FAILED",
        "{ nope }": "GRAPHQL_VALIDATION_FAILED",
        "{ " + "viewer { name } " * 1200 + "}": "LIMIT_EXCEEDED",  # graphql-core's "Validation aborted."
        "{ viewer { " + "name " * 6000 + "} }": "LIMIT_EXCEEDED",  # tokens
        "{ " + " ".join(f"a{n}: viewer {{ name }}" for n in range(40)) + " }": "LIMIT_EXCEEDED",  # aliases
        "query Q($n: Int!) { viewer { name } }": "GRAPHQL_VALIDATION_FAILED",  # unused variable
        TWO_OPERATIONS: "BAD_USER_INPUT",
    }
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for query, code in cases.items():
            body = _graphql(client, query)
            assert body.get("data") is None and body["errors"], (query[:60], body)
            for error in body["errors"]:
                assert error.get("extensions", {}).get("code") == code, (query[:60], error)


def test_several_operations_need_an_operation_name(server: LiveServer) -> None:
    with httpx.Client(base_url=server.url, timeout=20) as client:
        body = _graphql(client, TWO_OPERATIONS)
        assert body["data"] is None and "Must provide operation name" in body["errors"][0]["message"], body
        assert _graphql(client, TWO_OPERATIONS, "Second")["data"] == {"clusters": [{"name": "test"}]}
        assert _graphql(client, TWO_OPERATIONS, "First")["data"]["viewer"]["name"] == "dev"
    # over the WebSocket: two subscriptions in one document without operationName are refused, not started
    document = (
        "subscription A { attemptUpdates(jobId: 41) { position } } "
        "subscription B { adviceChanges(jobId: 41) { position } }"
    )
    with connect(server.ws_url, subprotocols=["graphql-transport-ws"], open_timeout=10) as ws:  # type: ignore[list-item]
        ws.send(json.dumps({"type": "connection_init", "payload": {}}))
        assert json.loads(ws.recv(timeout=10))["type"] == "connection_ack"
        ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": {"query": document}}))
        message = json.loads(ws.recv(timeout=10))
        assert message["type"] in ("error", "next"), message
        errors = message["payload"] if message["type"] == "error" else message["payload"]["errors"]
        assert "Must provide operation name" in errors[0]["message"], message
        assert errors[0]["extensions"]["code"] == "BAD_USER_INPUT", message


def _errors_in(log: str) -> list[str]:
    return [line for line in log.splitlines() if " ERROR " in line or "Traceback" in line or "destroyed" in line]


def test_a_client_that_goes_away_from_a_live_stream_is_not_an_error(server: LiveServer) -> None:
    with httpx.Client(base_url=server.url, timeout=20) as client:
        for _ in range(8):  # server-sent events: read the first event, then hang up
            with client.stream("GET", "/dashboard/live", params={"view": "overview"}) as stream:
                assert stream.status_code == 200
                for line in stream.iter_lines():
                    if line.startswith("event"):
                        break
    for goodbye in ("close", "drop") * 4:  # GraphQL subscriptions: a clean close, or the connection just dropped
        with connect(server.ws_url, subprotocols=["graphql-transport-ws"], open_timeout=10) as ws:  # type: ignore[list-item]
            ws.send(json.dumps({"type": "connection_init", "payload": {}}))
            assert json.loads(ws.recv(timeout=10))["type"] == "connection_ack"
            query = "subscription { attemptUpdates(jobId: 41) { position } }"
            ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": {"query": query}}))
            time.sleep(0.3)
            if goodbye == "drop":
                ws.socket.close()
    time.sleep(2)  # what the server logs as the streams end
    assert _errors_in(server.log()) == [], server.log()[-4000:]
    assert "cluster=test" in server.log()
