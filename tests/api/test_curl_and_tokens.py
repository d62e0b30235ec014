"""The user guide's two curl commands, as written, against a real server; forged and wrong tokens refused on
HTTP, REST and WebSocket."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from gql import Client, GraphQLRequest
from gql.transport.websockets import WebsocketsTransport
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from tests.api.helpers import LiveServer, operation, start_server, stop_server
from tests.factories import seed_many
from tests.plugins.database import Database
from tests.plugins.oidc_provider import (
    OidcProvider,
    forge_hmac_with_public_key,
    forge_unsigned,
    new_signing_key,
    tamper_payload,
    tamper_signature,
)

PREFIX = "/mission-control/recovery-engine-api"
pytestmark = pytest.mark.slow


def _curl(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    return subprocess.run(["bash", "-c", script], env={**os.environ, **env}, capture_output=True, text=True, timeout=60)


# The two commands exactly as the user guide prints them.
GUIDE_JOBS = '''curl --fail-with-body \\
  --header "Authorization: Bearer $RECOVERY_ACCESS_TOKEN" \\
  "$RECOVERY_HTTP_URL/v1/jobs/by-scheduler-id/$JOB_ID"'''
GUIDE_ADVICE = """curl --fail-with-body --get "$RECOVERY_HTTP_URL/v1/advice" \\
  --header "Authorization: Bearer $RECOVERY_ACCESS_TOKEN" \\
  --data-urlencode 'limit=100\'"""


@pytest.fixture
def oidc_server(oidc_provider: OidcProvider, database: Database, tmp_path: Path) -> Iterator[LiveServer]:
    """`recovery serve` under the user guide's URL prefix, verifying tokens of the real OIDC provider."""
    server = start_server(
        database.url,
        tmp_path,
        RECOVERY_OIDC_ISSUER=oidc_provider.issuer,
        RECOVERY_OIDC_AUDIENCE=oidc_provider.audience,
        RECOVERY_URL_PREFIX=PREFIX,
    )
    try:
        yield server
    finally:
        stop_server(server)


@pytest.mark.oidc
async def test_user_guide_curl_commands_work_as_written(
    oidc_provider: OidcProvider, oidc_server: LiveServer, sessions: async_sessionmaker[AsyncSession]
) -> None:
    seeded = await seed_many(sessions, count=2, attempts=2, advice=True)
    env = {
        "RECOVERY_HTTP_URL": oidc_server.url,
        "RECOVERY_ACCESS_TOKEN": oidc_provider.token("viewer-client"),
        "JOB_ID": str(seeded.jobs[0].slurm_job_id),
    }
    jobs = _curl(GUIDE_JOBS, env)
    assert jobs.returncode == 0, jobs.stdout + jobs.stderr
    attempts = json.loads(jobs.stdout)["attempts"]
    assert [(a["jobId"], a["attemptIndex"]) for a in attempts] == [
        (seeded.jobs[0].slurm_job_id, 0),
        (seeded.jobs[0].slurm_job_id, 1),
    ]
    assert all(a["heimdallJobId"] for a in attempts)
    advice = _curl(GUIDE_ADVICE, env)
    assert advice.returncode == 0, advice.stdout + advice.stderr
    body = json.loads(advice.stdout)
    assert len(body["advice"]) == 4 and "nextPageToken" in body
    assert {"jobId", "attemptIndex", "heimdallJobId"} <= set(body["advice"][0])
    # Without a token curl --fail-with-body fails and shows the JSON error.
    refused = _curl(GUIDE_ADVICE, {**env, "RECOVERY_ACCESS_TOKEN": ""})
    assert refused.returncode == 22 and json.loads(refused.stdout)["error"]["code"] == "UNAUTHENTICATED"


def _bad_tokens(provider: OidcProvider) -> dict[str, str]:
    now = int(time.time())
    good = provider.token("viewer-client")
    return {
        "forged-key": provider.sign(provider.valid_claims(), key=new_signing_key()),
        "tampered-signature": tamper_signature(good),
        "raised-role": tamper_payload(good, roles=["operator"]),
        "expired": provider.sign(provider.valid_claims(iat=now - 7200, exp=now - 3600)),
        "wrong-audience": provider.sign(provider.valid_claims(aud="someone-else")),
        "wrong-issuer": provider.sign(provider.valid_claims(iss="https://evil.example")),
        "alg-none": forge_unsigned(provider.valid_claims()),
        "hmac-confusion": forge_hmac_with_public_key(provider.valid_claims(), provider.signing_key),
    }


@pytest.mark.oidc
async def test_bad_tokens_are_refused_on_graphql_rest_and_websocket(
    oidc_provider: OidcProvider, oidc_server: LiveServer, sessions: async_sessionmaker[AsyncSession]
) -> None:
    await seed_many(sessions, count=1, advice=True)
    async with httpx.AsyncClient(base_url=oidc_server.url, timeout=20) as http:
        good = {"Authorization": f"Bearer {oidc_provider.token('viewer-client')}"}
        assert (await http.post("/graphql", json={"query": "{ viewer { roles } }"}, headers=good)).json()["data"][
            "viewer"
        ]["roles"] == ["viewer"]
        assert (await http.get("/v1/advice", headers=good)).status_code == 200
        # A viewer may not act; an operator may.
        advice_id = (await http.post("/graphql", json={"query": operation("AdvicePage")}, headers=good)).json()["data"][
            "advice"
        ]["edges"][0]["node"]["id"]
        refused = await http.post(
            "/graphql", json={"query": operation("ApproveAdvice"), "variables": {"id": advice_id}}, headers=good
        )
        assert refused.status_code == 403
        operator = {"Authorization": f"Bearer {oidc_provider.token('operator-client')}"}
        approved = await http.post(
            "/graphql", json={"query": operation("ApproveAdvice"), "variables": {"id": advice_id}}, headers=operator
        )
        assert approved.json()["data"]["approveAdvice"]["review"] == "APPROVED"

        for name, token in _bad_tokens(oidc_provider).items():
            headers = {"Authorization": f"Bearer {token}"}
            graphql = await http.post("/graphql", json={"query": "{ viewer { name } }"}, headers=headers)
            rest = await http.get("/v1/advice", headers=headers)
            assert graphql.status_code == 401, (name, graphql.text)
            assert rest.status_code == 401 and rest.json()["error"]["code"] == "UNAUTHENTICATED", (name, rest.text)

    cases: list[tuple[str, str | None]] = [*_bad_tokens(oidc_provider).items(), ("none", None)]
    for name, maybe_token in cases:
        payload = {"Authorization": f"Bearer {maybe_token}"} if maybe_token else {}
        transport = WebsocketsTransport(
            url=oidc_server.ws_url, subprotocols=[WebsocketsTransport.GRAPHQLWS_SUBPROTOCOL], init_payload=payload
        )
        with pytest.raises(Exception) as refused_ws:
            async with Client(transport=transport, fetch_schema_from_transport=False) as session:
                await session.subscribe(GraphQLRequest(operation("AdviceChanges"))).__anext__()
        assert (
            "4401" in repr(refused_ws.value)
            or "Unauthorized" in repr(refused_ws.value)
            or "closed" in repr(refused_ws.value).lower()
        ), (name, refused_ws.value)

    # The {"token": ...} form of connection_init works with a good token.
    transport = WebsocketsTransport(
        url=oidc_server.ws_url,
        subprotocols=[WebsocketsTransport.GRAPHQLWS_SUBPROTOCOL],
        init_payload={"token": oidc_provider.token("viewer-client")},
    )
    async with Client(transport=transport, fetch_schema_from_transport=False) as session:
        result = await session.execute(GraphQLRequest("{ viewer { roles } }"))
    assert result["viewer"]["roles"] == ["viewer"]
