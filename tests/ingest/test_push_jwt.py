"""A collector authenticated by a real signed JWT: the OIDC provider's key signs a token with the `collector` role,
the OpenTelemetry exporter sends it over HTTP to a running `recovery serve`; a viewer token and a tampered one
cannot push."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.evidence.models import Anomaly
from app.infra.context import AppContext
from app.ingest import queries as ingest_queries
from tests.api.helpers import LiveServer, start_server, stop_server
from tests.factories import add_attempt, anomalies, enrolled_job
from tests.ingest.helpers import otel_export, otel_records, real_lines
from tests.plugins.database import Database
from tests.plugins.oidc_provider import OidcProvider, tamper_payload

pytestmark = pytest.mark.oidc


@pytest.fixture
def server(oidc_provider: OidcProvider, database: Database, ctx: AppContext, tmp_path: Path) -> Iterator[LiveServer]:
    """`recovery serve` taking pushes, with bearer tokens of the real OIDC provider and no collector secrets."""
    live = start_server(
        database.url,
        tmp_path,
        RECOVERY_OIDC_ISSUER=oidc_provider.issuer,
        RECOVERY_OIDC_AUDIENCE=oidc_provider.audience,
        RECOVERY_CLUSTER=ctx.settings.cluster,
        RECOVERY_LOG_PUSH="true",
    )
    try:
        yield live
    finally:
        stop_server(live)


async def test_a_signed_collector_token_pushes_and_a_viewer_or_tampered_token_cannot(
    ctx: AppContext, oidc_provider: OidcProvider, server: LiveServer
) -> None:
    job = await enrolled_job(ctx, 7301)
    attempt = await add_attempt(ctx, job, 0, start_time=dt.datetime.now(dt.UTC) - dt.timedelta(hours=1))
    lines = real_lines("ddp-raise.log", until="attempt 1")
    resource = {"slurm.job.id": "7301", "host.name": "node2", "cluster": ctx.settings.cluster}
    records = otel_records(lines, resource)
    collector = oidc_provider.sign(oidc_provider.valid_claims(sub="alloy-node2", roles=["collector"]))

    viewer = oidc_provider.token("viewer-client")
    assert not otel_export(server, records, secret=viewer)
    answer = httpx.post(f"{server.url}/v1/logs", headers={"Authorization": f"Bearer {viewer}"}, timeout=20)
    assert answer.status_code == 403, answer.text
    raised = tamper_payload(oidc_provider.token("viewer-client"), roles=["collector"])
    answer = httpx.post(f"{server.url}/v1/logs", headers={"Authorization": f"Bearer {raised}"}, timeout=20)
    assert answer.status_code == 401, answer.text
    async with ctx.sessions() as session:
        assert (await ingest_queries.push_counts(session))["lines"] == 0

    assert otel_export(server, records, secret=collector), server.log()
    crashes = await anomalies(ctx, Anomaly.attempt_id == attempt.id, Anomaly.kind == "CRASH")
    assert crashes, server.log()
    async with ctx.sessions() as session:
        streams = await ingest_queries.push_counts(session)
        assert streams["lines"] == len(lines)
    # the token cannot read the API: a collector is no viewer
    answer = httpx.get(f"{server.url}/v1/clusters", headers={"Authorization": f"Bearer {collector}"}, timeout=20)
    assert answer.status_code == 403, answer.text
