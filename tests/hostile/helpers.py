"""Shared code of the hostile suite: the Target (a real server, tokens, a session), seeding, ids and cursors."""

from __future__ import annotations

import sqlite3
import urllib.parse
from dataclasses import dataclass

import httpx
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.audit import service as audit
from tests.api.helpers import LiveServer
from tests.factories import Seeded, seed_many
from tests.hostile.cases import World, forged_tokens
from tests.plugins.database import Database
from tests.plugins.oidc_provider import OidcProvider

INVALID_UTF8 = b"bad \xff\xfe text \xc3("


@dataclass
class Target:
    """The server under attack and what the attacker may legitimately hold."""

    server: LiveServer
    provider: OidcProvider
    tokens: dict[str, str]  # viewer, operator, norole
    session_cookie: str  # the dashboard cookie of an operator who logged in through the provider
    seeded: Seeded
    backend: str

    @property
    def origin(self) -> str:
        parts = urllib.parse.urlsplit(self.server.url)
        return f"{parts.scheme}://{parts.netloc}"


async def seed_world(sessions: async_sessionmaker[AsyncSession]) -> Seeded:
    """Three workflows, two attempts each, Advice, evidence and audit events (enough for two pages of each list)."""
    seeded = await seed_many(sessions, count=3, attempts=2, advice=True, checkpoints=1, anomalies=1)
    async with sessions() as session, session.begin():
        for n in range(4):
            await audit.record(
                session,
                component="api",
                event_type="test.hostile",
                message=f"event {n}",
                cluster="test",
                slurm_job_id=seeded.jobs[0].slurm_job_id,
                attempt_index=0,
            )
    return seeded


def write_invalid_utf8(database: Database, seeded: Seeded) -> None:
    """What another tool may leave in a SQLite TEXT column: bytes that are not UTF-8 (sqlite3 writes them raw)."""
    path = make_url(database.url).database
    assert path
    with sqlite3.connect(path) as conn:
        blob = sqlite3.Binary(INVALID_UTF8)
        conn.execute("UPDATE workflows SET latest_job_name = CAST(? AS TEXT)", (blob,))
        conn.execute("UPDATE attempts SET state_reason = CAST(? AS TEXT)", (blob,))
        conn.execute("UPDATE audit_events SET message = CAST(? AS TEXT)", (blob,))
        conn.execute("UPDATE advice SET reason = CAST(? AS TEXT)", (blob,))


def dashboard_login(server: LiveServer, provider: OidcProvider, username: str) -> str:
    """Log in through the dashboard's real OIDC flow; returns the session cookie value."""
    with httpx.Client(base_url=server.url, follow_redirects=False, timeout=20) as client:
        start = client.get("/dashboard/auth/login", params={"next": "/dashboard/workflow"})
        assert start.status_code in (302, 303), start.text
        callback = provider.login(start.headers["location"], username)
        done = client.get(callback)
        assert done.status_code == 303, done.text
        cookie = client.cookies.get("recovery_dashboard")
        assert cookie
        return cookie


def make_world(target: Target) -> World:
    """Seeded ids, a real cursor of every listing (read through the API) and forged tokens."""
    seeded = target.seeded
    attempt = seeded.attempts[0]
    headers = {"Authorization": f"Bearer {target.tokens['viewer']}"}
    cursors: dict[str, str] = {}
    with httpx.Client(base_url=target.server.url, headers=headers, timeout=20) as client:
        for path, key in (
            (f"/v1/jobs/by-scheduler-id/{attempt.slurm_job_id}", "attempts"),
            ("/v1/advice", "advice"),
            ("/v1/workflows", "workflows"),
            ("/v1/audit/events", "events"),
        ):
            page = client.get(path, params={"limit": 1}).json()
            assert page[key] and page["nextPageToken"], (path, page)
            cursors[path] = page["nextPageToken"]
        body = client.post("/graphql", json={"query": "{ workflows(first: 1) { pageInfo { endCursor } } }"}).json()
        graphql_cursor = body["data"]["workflows"]["pageInfo"]["endCursor"]
    kid = target.provider.signing_key.kid
    return World(
        job_id=attempt.slurm_job_id,
        attempt_index=attempt.attempt_index,
        workflow_id=seeded.jobs[0].workflow_id or 0,
        advice_id=seeded.advice[0].id,
        attempt_uuid=attempt.uuid,
        rest_cursors=cursors,
        graphql_cursor=graphql_cursor,
        forged=forged_tokens(kid or "no-kid"),
    )
