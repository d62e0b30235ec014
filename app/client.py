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
import threading
from collections.abc import Callable
from typing import Any, TextIO

from app.domain.edge.terminal import terminal_text
from app.infra.config import Settings

SERVER_ENV = "RECOVERY_HTTP_URL"  # the user guide's names
TOKEN_ENV = "RECOVERY_ACCESS_TOKEN"
EXIT_OK, EXIT_NOT_FOUND, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3
EXIT_BAD_ANSWER = 2  # the service answered something that is not what this client reads (like a usage error: no retry)
DEFAULT_TIMEOUT = 15.0  # seconds for one whole request: connecting, sending, and reading the entire answer
MAX_ANSWER_BYTES = 8 * 1024 * 1024  # one page of attempts is far smaller
# A job has ended when its newest attempt's story says so (recovered/running mean more may come).
ENDED_OUTCOMES = frozenset({"completed", "stopped", "observe only"})
SETTLE_SECONDS = 5.0  # after an ending sentence, how long watch waits for a decision that changes it
_REF = re.compile(r"\s*([0-9]{1,10}(?:_[0-9]{1,10})?)(?:[/-]([0-9]{1,6}))?\s*", re.ASCII)

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


def say(out: TextIO, text: object) -> None:
    """Print one line: every text that reaches the terminal goes through here, control characters removed."""
    out.write(terminal_text(text) + "\n")


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


def _get(url: str, params: dict[str, str] | None, headers: dict[str, str], timeout: float) -> tuple[int, bytes]:
    """(status, body) of one GET that ends within `timeout` seconds in all (httpx's timeouts are per read: a server
    that trickles a byte a second would hold it for ever), reading at most MAX_ANSWER_BYTES."""
    import httpx

    outcome: dict[str, Any] = {}
    client = httpx.Client(timeout=timeout, follow_redirects=False)

    def run() -> None:
        try:
            with client.stream("GET", url, params=params, headers=headers) as response:
                body = bytearray()
                for chunk in response.iter_raw():
                    body += chunk
                    if len(body) > MAX_ANSWER_BYTES:
                        raise ClientError(
                            f"the answer of {url} is larger than {MAX_ANSWER_BYTES} bytes", EXIT_BAD_ANSWER
                        )
                outcome["answer"] = (response.status_code, response.headers.get("content-encoding"), bytes(body))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            outcome["error"] = exc

    worker = threading.Thread(target=run, name="recovery-client-request", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        client.close()  # ends the read in the other thread; the process does not wait for it (daemon)
        raise ClientError(f"no complete answer from {url} within {timeout:g} s (--timeout)")
    client.close()
    error = outcome.get("error")
    if isinstance(error, ClientError):
        raise error
    if error is not None:
        raise ClientError(f"cannot reach the service at {url}: {error} (set --server or {SERVER_ENV})")
    status_code, encoding, body = outcome["answer"]
    if encoding not in (None, "identity"):
        raise ClientError(f"{url} answered in a content encoding ({encoding}) not asked for", EXIT_BAD_ANSWER)
    return int(status_code), body


def _answer(url: str, status_code: int, body: bytes) -> Any:
    """The JSON of a 200 answer, or ClientError saying (safely) what came instead."""
    if status_code != 200:
        text = body[:200].decode("utf-8", "replace")
        raise ClientError(f"the service at {url} answered {status_code}: {text}")
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        raise ClientError(
            f"the service at {url} answered 200 with something that is not JSON", EXIT_BAD_ANSWER
        ) from None


def _checked_attempt(value: Any, url: str) -> dict[str, Any]:
    """An attempt of the answer, with the fields this client reads of the right types (else ClientError)."""

    def bad(what: str) -> ClientError:
        return ClientError(f"the service at {url} answered an attempt {what}", EXIT_BAD_ANSWER)

    if not isinstance(value, dict):
        raise bad("that is not a JSON object")
    index = value.get("attemptIndex")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise bad("without a whole-number attemptIndex")
    for key in ("state", "jobId", "cluster", "workflowId", "attemptRef"):
        if value.get(key) is not None and not isinstance(value.get(key), str | int):
            raise bad(f"whose {key} is not text")
    story = value.get("story")
    if story is not None and not isinstance(story, dict):
        raise bad("whose story is not a JSON object")
    for key in ("sentence", "outcome"):
        if story and story.get(key) is not None and not isinstance(story.get(key), str):
            raise bad(f"whose story {key} is not text")
    return value


def fetch_attempts(base: str, job: str, token: str | None, timeout: float = DEFAULT_TIMEOUT) -> list[dict[str, Any]]:
    """Every attempt of the job (with its story), following nextPageToken; ClientError for any unusable answer."""
    attempts: list[dict[str, Any]] = []
    page: str | None = None
    url = f"{base}/v1/jobs/by-scheduler-id/{job}"
    for _ in range(100):
        headers = {"Accept-Encoding": "identity", **_headers(token)}  # the body is read raw (iter_raw)
        status_code, body = _get(url, {"page": page} if page else None, headers, timeout)
        if status_code == 404:
            raise ClientError(f"job {job} is not recorded by the service at {base}", EXIT_NOT_FOUND)
        if status_code in (401, 403):
            raise ClientError(f"the service at {base} answered {status_code}: pass --token or {TOKEN_ENV}")
        answer = _answer(url, status_code, body)
        if not isinstance(answer, dict) or not isinstance(answer.get("attempts"), list):
            raise ClientError(f"the service at {url} answered 200 without a list of attempts", EXIT_BAD_ANSWER)
        attempts += [_checked_attempt(a, url) for a in answer["attempts"]]
        if not attempts:
            _refused(answer.get("enrolment"), job, base)
        page = answer.get("nextPageToken")
        if page is not None and not isinstance(page, str):
            raise ClientError(f"the service at {url} answered a nextPageToken that is not text", EXIT_BAD_ANSWER)
        if not page:
            break
    if not attempts:
        raise ClientError(f"the service at {base} answered no attempts for job {job}", EXIT_BAD_ANSWER)
    return sorted(attempts, key=lambda a: int(a["attemptIndex"]))


def _refused(enrolment: Any, job: str, base: str) -> None:
    """A job the service recorded but refused (no attempts): ClientError saying why, in the dashboard's words."""
    if not isinstance(enrolment, dict) or enrolment.get("enrolled") is not False:
        return
    reason = enrolment.get("reason")
    why = reason if isinstance(reason, str) and reason else "no reason recorded"
    state = str(enrolment.get("enrolment") or "NOT_ENROLLED").replace("_", " ").lower()
    raise ClientError(
        f"job {job} is recorded but not enrolled ({state}), so Recovery does not look after it: {why}",
        EXIT_NOT_FOUND,
    )


def _line(attempt: dict[str, Any]) -> str:
    story = attempt.get("story") or {}
    outcome = story.get("outcome") or "?"
    sentence = story.get("sentence") or f"Attempt {attempt['attemptIndex']} is {attempt.get('state') or '?'}"
    return f"[{outcome}] {sentence}"


def has_ended(attempts: list[dict[str, Any]]) -> bool:
    """True when the newest attempt's story says the job is over (completed, stopped, observe only)."""
    newest = max(attempts, key=lambda a: int(a["attemptIndex"]))
    return ((newest.get("story") or {}).get("outcome") or "") in ENDED_OUTCOMES


def status(
    settings: Settings,
    ref: str,
    *,
    server: str | None = None,
    token: str | None = None,
    as_json: bool = False,
    out: TextIO = sys.stdout,
    timeout: float = DEFAULT_TIMEOUT,
) -> int:
    """Print the story of a job (every attempt) or of one attempt; 0 when found, 1 when not, 2/3 on errors."""
    code, _ = _status(settings, ref, server=server, token=token, as_json=as_json, out=out, timeout=timeout)
    return code


def _status(
    settings: Settings,
    ref: str,
    *,
    server: str | None,
    token: str | None,
    as_json: bool,
    out: TextIO,
    timeout: float,
) -> tuple[int, list[dict[str, Any]]]:
    parsed = parse_ref(ref)
    if parsed is None:
        say(out, f"recovery status: {ref[:40]!r} is not a job id (12345, 12345_7, 12345/1)")
        return EXIT_USAGE, []
    job, index = parsed
    base = server_url(settings, server)
    try:
        attempts = fetch_attempts(base, job, token, timeout)
    except ClientError as exc:
        say(out, f"recovery status: {exc}")
        return exc.code, []
    shown = attempts
    if index is not None:
        shown = [a for a in attempts if a["attemptIndex"] == index]
        if not shown:
            say(out, f"recovery status: job {job} has no attempt {index} (attempt 0 is the first execution)")
            return EXIT_NOT_FOUND, attempts
    if as_json:
        keep = ("jobId", "attemptIndex", "attemptRef", "cluster", "workflowId", "state", "nodes", "story")
        rows = [{k: a.get(k) for k in keep} for a in shown]
        # json.dumps escapes every control and non-ASCII character (ensure_ascii): safe on a terminal as it is
        out.write(json.dumps({"job": job, "server": base, "attempts": rows}, indent=2) + "\n")
        return EXIT_OK, attempts
    first = shown[0]
    say(out, f"job {job} on {first.get('cluster')}, workflow {first.get('workflowId') or '-'}")
    for attempt in shown:
        say(out, f"  {_line(attempt)}")
    last = shown[-1]
    say(out, f"  dashboard: {base}/dashboard/jobs/{last.get('jobId')}/attempts/{last['attemptIndex']}")
    return EXIT_OK, attempts


def watch(
    settings: Settings,
    ref: str,
    *,
    server: str | None = None,
    token: str | None = None,
    out: TextIO = sys.stdout,
    max_updates: int | None = None,
    connect: Callable[..., Any] | None = None,
    follow: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    settle: float = SETTLE_SECONDS,
) -> int:
    """Print the job's story, then follow it live through the subscription until the job has ended (after its
    last sentence), or until interrupted with `follow`."""
    parsed = parse_ref(ref)
    if parsed is None or parsed[1] is not None or "_" in parsed[0]:
        say(out, f"recovery watch: {ref[:40]!r} is not a Slurm job id (12345)")
        return EXIT_USAGE
    code, attempts = _status(settings, ref, server=server, token=token, as_json=False, out=out, timeout=timeout)
    if code != EXIT_OK:
        return code
    if not follow and has_ended(attempts):
        say(out, "the job has ended (recovery watch --follow keeps watching)")
        return EXIT_OK
    out.flush()
    base = server_url(settings, server)
    seen = {a["attemptIndex"]: _line(a) for a in attempts}
    ws_url = re.sub(r"^http", "ws", base) + "/graphql"
    from websockets.sync.client import connect as ws_connect

    opener: Any = connect or ws_connect
    headers = _headers(token)
    updates = 0
    try:
        with opener(
            ws_url, subprotocols=["graphql-transport-ws"], open_timeout=timeout, close_timeout=2, max_size=2**20
        ) as ws:
            ws.send(json.dumps({"type": "connection_init", "payload": headers}))
            ack = _message(ws.recv(timeout=timeout), ws_url)
            if ack.get("type") != "connection_ack":
                raise ClientError(f"the service refused the subscription: {ack}")
            variables = {"jobId": int(parsed[0])}
            ws.send(
                json.dumps({"id": "1", "type": "subscribe", "payload": {"query": WATCH_QUERY, "variables": variables}})
            )
            # What changed between the first look and the subscription starting is not lost: look once more.
            attempts = fetch_attempts(base, parsed[0], token, timeout)
            for attempt in attempts:
                line = _line(attempt)
                if seen.get(attempt["attemptIndex"]) != line:
                    seen[attempt["attemptIndex"]] = line
                    say(out, f"  {line}")
            newest = {a["attemptIndex"]: a for a in attempts}
            say(out, "watching (Ctrl-C to stop)...")
            out.flush()
            ended_at: float | None = None
            while max_updates is None or updates < max_updates:
                if not follow and ended_at is None and has_ended(list(newest.values())):
                    ended_at = _now()
                wait = None if ended_at is None else max(0.0, ended_at + settle - _now())
                try:
                    raw = ws.recv(timeout=wait)
                except TimeoutError:
                    if ended_at is not None:
                        say(out, "the job has ended (recovery watch --follow keeps watching)")
                        return EXIT_OK
                    raise
                message = _message(raw, ws_url)
                kind = message.get("type")
                if kind == "ping":
                    ws.send(json.dumps({"type": "pong"}))
                    continue
                if kind in ("error", "complete"):
                    raise ClientError(f"the subscription ended: {message.get('payload')}")
                if kind != "next":
                    continue
                payload = message.get("payload")
                payload = payload if isinstance(payload, dict) else {}
                errors = payload.get("errors")
                for error in errors if isinstance(errors, list) else []:
                    text = error.get("message") if isinstance(error, dict) else error
                    say(out, f"  (the service reported: {text})")
                data = payload.get("data")
                update = data.get("attemptUpdates") if isinstance(data, dict) else None
                attempt_value = update.get("attempt") if isinstance(update, dict) else None
                if not isinstance(attempt_value, dict) or "attemptIndex" not in attempt_value:
                    continue
                attempt = _checked_attempt(attempt_value, ws_url)
                newest[attempt["attemptIndex"]] = attempt
                ended_at = None  # a new sentence: the job's end (if any) is judged again from here
                line = _line(attempt)
                if seen.get(attempt["attemptIndex"]) == line:
                    continue
                seen[attempt["attemptIndex"]] = line
                updates += 1
                say(out, f"  {line}")
                out.flush()
    except KeyboardInterrupt:
        return EXIT_OK
    except ClientError as exc:
        say(out, f"recovery watch: {exc}")
        return exc.code
    except (OSError, TimeoutError) as exc:
        say(out, f"recovery watch: cannot follow {ws_url}: {exc}")
        return EXIT_UNAVAILABLE
    except Exception as exc:  # websockets' ConnectionClosed and handshake errors
        say(out, f"recovery watch: the live connection to {ws_url} ended: {exc}")
        return EXIT_UNAVAILABLE
    return EXIT_OK


def _now() -> float:
    import time

    return time.monotonic()


def _message(raw: Any, url: str) -> dict[str, Any]:
    """One graphql-transport-ws message as a JSON object, or ClientError."""
    try:
        message = json.loads(raw)
    except (ValueError, TypeError, RecursionError):
        raise ClientError(f"{url} sent a message that is not JSON", EXIT_BAD_ANSWER) from None
    if not isinstance(message, dict):
        raise ClientError(f"{url} sent a message that is not a JSON object", EXIT_BAD_ANSWER)
    return message
