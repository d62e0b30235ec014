"""`recovery status JOB[/ATTEMPT]` and `recovery watch JOB`: the story of a job from a running service.

status reads GET /v1/jobs/by-scheduler-id/<job> (each attempt carries its story); watch prints the same and then
follows the job live through the GraphQL subscription `attemptUpdates` (graphql-transport-ws), printing each new
sentence. The service is --server URL, else RECOVERY_HTTP_URL, else this machine's RECOVERY_BIND; the token is
--token, else RECOVERY_ACCESS_TOKEN (none needed against a dev-mode service).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from typing import Any, TextIO

from app.config import Settings

SERVER_ENV = "RECOVERY_HTTP_URL"  # the user guide's names
TOKEN_ENV = "RECOVERY_ACCESS_TOKEN"
EXIT_OK, EXIT_NOT_FOUND, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3
_REF = re.compile(r"\s*([0-9]{1,10}(?:_[0-9]{1,10})?)(?:[/-]([0-9]{1,6}))?\s*")

WATCH_QUERY = """
subscription Watch($jobId: Int!, $after: String) {
  attemptUpdates(jobId: $jobId, after: $after) {
    position
    created
    state
    attempt { attemptIndex state story { sentence outcome } }
  }
}
"""


class ClientError(Exception):
    """The service could not be asked (unreachable, refused, or an unexpected answer); exit code attached."""

    def __init__(self, message: str, code: int = EXIT_UNAVAILABLE) -> None:
        super().__init__(message)
        self.code = code


def server_url(settings: Settings, server: str | None) -> str:
    """--server, RECOVERY_HTTP_URL, or this machine's own service (RECOVERY_BIND and RECOVERY_URL_PREFIX)."""
    url = server or os.environ.get(SERVER_ENV) or f"http://{settings.bind}{settings.url_prefix or ''}"
    return url.rstrip("/")


def _headers(token: str | None) -> dict[str, str]:
    token = token or os.environ.get(TOKEN_ENV)
    return {"Authorization": f"Bearer {token}"} if token else {}


def parse_ref(text: str) -> tuple[str, int | None] | None:
    """`12345`, `12345_7` (array task) or either with `/N` or `-N` (attempt N); None for anything else."""
    match = _REF.fullmatch(text or "")
    if not match:
        return None
    return match.group(1), int(match.group(2)) if match.group(2) is not None else None


def fetch_attempts(base: str, job: str, token: str | None) -> list[dict[str, Any]]:
    """Every attempt of the job (with its story), following nextPageToken."""
    import httpx

    attempts: list[dict[str, Any]] = []
    page: str | None = None
    for _ in range(100):
        try:
            response = httpx.get(
                f"{base}/v1/jobs/by-scheduler-id/{job}",
                params={"page": page} if page else None,
                headers=_headers(token),
                timeout=15,
            )
        except httpx.HTTPError as exc:
            raise ClientError(f"cannot reach the service at {base}: {exc} (set --server or {SERVER_ENV})") from None
        if response.status_code == 404:
            raise ClientError(f"job {job} is not recorded by the service at {base}", EXIT_NOT_FOUND)
        if response.status_code in (401, 403):
            raise ClientError(f"the service at {base} answered {response.status_code}: pass --token or {TOKEN_ENV}")
        if response.status_code != 200:
            raise ClientError(f"the service at {base} answered {response.status_code}: {response.text[:200]}")
        body = response.json()
        attempts += body.get("attempts", [])
        page = body.get("nextPageToken")
        if not page:
            break
    return sorted(attempts, key=lambda a: a["attemptIndex"])


def _line(attempt: dict[str, Any]) -> str:
    story = attempt.get("story") or {}
    outcome = story.get("outcome", "?")
    return (
        f"[{outcome}] {story.get('sentence') or 'Attempt ' + str(attempt['attemptIndex']) + ' is ' + attempt['state']}"
    )


def status(
    settings: Settings,
    ref: str,
    *,
    server: str | None = None,
    token: str | None = None,
    as_json: bool = False,
    out: TextIO = sys.stdout,
) -> int:
    """Print the story of a job (every attempt) or of one attempt; 0 when found, 1 when not, 2/3 on errors."""
    parsed = parse_ref(ref)
    if parsed is None:
        out.write(f"recovery status: {ref[:40]!r} is not a job id (12345, 12345_7, 12345/1)\n")
        return EXIT_USAGE
    job, index = parsed
    base = server_url(settings, server)
    try:
        attempts = fetch_attempts(base, job, token)
    except ClientError as exc:
        out.write(f"recovery status: {exc}\n")
        return exc.code
    if index is not None:
        attempts = [a for a in attempts if a["attemptIndex"] == index]
        if not attempts:
            out.write(f"recovery status: job {job} has no attempt {index} (attempt 0 is the first execution)\n")
            return EXIT_NOT_FOUND
    if as_json:
        keep = ("jobId", "attemptIndex", "attemptRef", "cluster", "workflowId", "state", "nodes", "story")
        shown = [{k: a.get(k) for k in keep} for a in attempts]
        out.write(json.dumps({"job": job, "server": base, "attempts": shown}, indent=2) + "\n")
        return EXIT_OK
    first = attempts[0]
    out.write(f"job {job} on {first.get('cluster')}, workflow {first.get('workflowId') or '-'}\n")
    for attempt in attempts:
        out.write(f"  {_line(attempt)}\n")
    last = attempts[-1]
    out.write(f"  dashboard: {base}/dashboard/jobs/{last['jobId']}/attempts/{last['attemptIndex']}\n")
    return EXIT_OK


def watch(
    settings: Settings,
    ref: str,
    *,
    server: str | None = None,
    token: str | None = None,
    out: TextIO = sys.stdout,
    max_updates: int | None = None,
    connect: Callable[..., Any] | None = None,
) -> int:
    """Print the job's story, then follow it live through the subscription until interrupted."""
    parsed = parse_ref(ref)
    if parsed is None or parsed[1] is not None or "_" in parsed[0]:
        out.write(f"recovery watch: {ref[:40]!r} is not a Slurm job id (12345)\n")
        return EXIT_USAGE
    code = status(settings, ref, server=server, token=token, out=out)
    if code != EXIT_OK:
        return code
    out.flush()
    base = server_url(settings, server)
    try:
        seen = {a["attemptIndex"]: _line(a) for a in fetch_attempts(base, parsed[0], token)}
    except ClientError as exc:
        out.write(f"recovery watch: {exc}\n")
        return exc.code
    ws_url = re.sub(r"^http", "ws", base) + "/graphql"
    from websockets.sync.client import connect as ws_connect

    opener: Any = connect or ws_connect
    headers = _headers(token)
    updates = 0
    try:
        with opener(ws_url, subprotocols=["graphql-transport-ws"], open_timeout=15, close_timeout=2) as ws:
            ws.send(json.dumps({"type": "connection_init", "payload": headers}))
            ack = json.loads(ws.recv(timeout=15))
            if ack.get("type") != "connection_ack":
                raise ClientError(f"the service refused the subscription: {ack}")
            variables = {"jobId": int(parsed[0])}
            ws.send(
                json.dumps({"id": "1", "type": "subscribe", "payload": {"query": WATCH_QUERY, "variables": variables}})
            )
            # What changed between the first look and the subscription starting is not lost: look once more.
            for attempt in fetch_attempts(base, parsed[0], token):
                line = _line(attempt)
                if seen.get(attempt["attemptIndex"]) != line:
                    seen[attempt["attemptIndex"]] = line
                    out.write(f"  {line}\n")
            out.write("watching (Ctrl-C to stop)...\n")
            out.flush()
            while max_updates is None or updates < max_updates:
                message = json.loads(ws.recv())
                kind = message.get("type")
                if kind == "ping":
                    ws.send(json.dumps({"type": "pong"}))
                    continue
                if kind in ("error", "complete"):
                    raise ClientError(f"the subscription ended: {message.get('payload')}")
                if kind != "next":
                    continue
                payload = message.get("payload") or {}
                for error in payload.get("errors") or []:
                    out.write(f"  (the service reported: {error.get('message')})\n")
                data = payload.get("data") or {}
                update = data.get("attemptUpdates") or {}
                attempt = update.get("attempt") or {}
                if "attemptIndex" not in attempt:
                    continue
                line = _line(attempt)
                if seen.get(attempt["attemptIndex"]) == line:
                    continue
                seen[attempt["attemptIndex"]] = line
                updates += 1
                out.write(f"  {line}\n")
                out.flush()
    except KeyboardInterrupt:
        return EXIT_OK
    except ClientError as exc:
        out.write(f"recovery watch: {exc}\n")
        return exc.code
    except (OSError, TimeoutError) as exc:
        out.write(f"recovery watch: cannot follow {ws_url}: {exc}\n")
        return EXIT_UNAVAILABLE
    except Exception as exc:  # websockets' ConnectionClosed and handshake errors
        out.write(f"recovery watch: the live connection to {ws_url} ended: {exc}\n")
        return EXIT_UNAVAILABLE
    return EXIT_OK
