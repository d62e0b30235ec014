"""The slurmrestd implementation of Scheduler (Slurm on Kubernetes/Slinky, or any site that runs slurmrestd).

Version: on first use the adapter reads the server's OpenAPI description (`GET /openapi/v3`) and
uses the newest `/slurm/v0.0.NN/` API it offers among those app.slurm.parse reads (KNOWN_VERSIONS:
v0.0.36 to v0.0.45), unless RECOVERY_SLURMRESTD_API_VERSION names one; a server that offers none of
them is refused with RestVersionUnsupported (which versions it offers, which we read). Tested live:
22.05 offers v0.0.36-v0.0.38 (v0.0.38 used), 24.11 v0.0.40-v0.0.42 (v0.0.42), 26.05 v0.0.42-v0.0.45
(v0.0.45); real answers of each are in tests/fixtures/slurm/<release>/rest/.

What each action is on slurmrestd:

* observe: `GET /slurm/vX/jobs` (ONE bulk request per tick, the same JSON as `squeue --json`);
* release: `POST /slurm/vX/job/{id}` with `{"hold": false}`;
* cancel: `DELETE /slurm/vX/job/{id}` (SIGKILL, as scancel);
* excluded nodes: `POST /slurm/vX/job/{id}` with `excluded_nodes` when the version's job update
  schema has that field (v0.0.40+: a list); v0.0.36-v0.0.38 (22.05) answer "Disabled key: excluded_nodes";
* requeue-hold: `GET /slurm/vX/job/{id}/requeue?Hold=true` where the server has that path (v0.0.45,
  26.05; `?Hold` with an empty value is taken as NOT set); older versions have no requeue operation
  (job update's `requeue` is the --requeue flag, not an action);
* an array task (`<array id>_<task id>`): v0.0.40+ reject every job update of a task ("Submit job
  update against Array Job's JobID instead of array task id"), and the array's id would update
  every task, so release and excluded nodes of a task have no REST form there; requeue (v0.0.45)
  and cancel take the task form.

An action without a REST form runs `scontrol` (the CLI adapter, with the same settings) when
RECOVERY_SLURMRESTD_CLI_FALLBACK is true (the default; needs Slurm's client commands and
credentials on the worker's host); when it is false the action raises RestUnsupported (an
OperationDisabled: the controller abandons the Advice with the reason instead of retrying).
Accounting (`job_history`) uses `/slurmdb/vX/job/{id}` when the server offers slurmdb paths,
else the CLI fallback's sacct, else None (no accounting known).

Errors are classified as the CLI adapter's are, from the `errors[].error`/`description` texts
slurmrestd returns (they carry the same slurm_strerror messages scontrol prints); connection
failures, timeouts and HTTP 5xx without such a text are transient.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import httpx

from app.infra.config import Settings
from app.slurm.adapter import JobLookup, JobTarget, target_text
from app.slurm.cli_scheduler import CliScheduler
from app.slurm.errors import (
    JobNotFound,
    JobStateConflict,
    OperationDisabled,
    SchedulerError,
    TransientSchedulerError,
    classify,
)
from app.slurm.incremental import JobsParser, decode_jobs_answer
from app.slurm.parse import ParseError, load_json, parse_partition_nodes, parse_sacct_json, parse_snapshot
from app.slurm.records import AccountingRecord, CommandResult, Snapshot
from app.slurm.rest_auth import SignedTokens, TokenFile, TokenSource

# API versions whose job JSON app.slurm.parse reads, oldest first
KNOWN_VERSIONS = tuple(f"v0.0.{minor}" for minor in range(36, 46))
_VERSION_PATH = re.compile(r"^/slurm/(v0\.0\.\d+)/jobs/?$")
_DBD_PATH = re.compile(r"^/slurmdb/(v0\.0\.\d+)/job/\{job_id\}/?$")


class RestUnsupported(OperationDisabled):
    """The action has no slurmrestd form in this API version and the CLI fallback is off."""


class RestVersionUnsupported(OperationDisabled):
    """slurmrestd offers no job API version that Recovery reads (or not the one the settings force)."""


# v0.0.40+ (24.11, 26.05) answer this to a job update named `<array id>_<task id>`
_TASK_UPDATE_REJECTED = "instead of array task id"


def parse_rest_url(url: str) -> tuple[str, str | None]:
    """(base URL for requests, unix socket path or None) from `http://host:port` or `unix:/path`."""
    text = url.strip()
    if text.startswith("unix:"):
        path = text[len("unix:") :]
        if not path.startswith("/"):
            raise ValueError(f"a unix socket address needs an absolute path: {url!r}")
        return "http://slurmrestd", path
    if text.startswith(("http://", "https://")):
        return text.rstrip("/"), None
    raise ValueError(f"RECOVERY_SLURMRESTD_URL must be http(s)://host:port or unix:/path, got {url!r}")


class RestScheduler:
    """Scheduler over slurmrestd (httpx; a unix socket or TCP with a JWT); see the module docstring."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        url: str | None = None,
        tokens: TokenSource | None = None,
        fallback: CliScheduler | None = None,
        timeout: float | None = None,
        api_version: str | None = None,
    ) -> None:
        settings = settings or Settings.from_env()
        self.base_url, self.socket = parse_rest_url(url if url is not None else settings.slurmrestd_url)
        self.timeout = timeout if timeout is not None else settings.slurm_command_timeout
        if tokens is None and self.socket is None:
            if settings.slurmrestd_jwt_key:
                tokens = SignedTokens(
                    settings.slurmrestd_jwt_key,
                    user=settings.slurmrestd_user,
                    lifetime=settings.slurmrestd_token_lifetime,
                )
            elif settings.slurmrestd_token_file:
                tokens = TokenFile(settings.slurmrestd_token_file, user=settings.slurmrestd_user)
        self.tokens = tokens
        if fallback is None and settings.slurmrestd_cli_fallback:
            fallback = CliScheduler(settings)
        self.fallback = fallback
        self.forced_version = (api_version if api_version is not None else settings.slurmrestd_api_version) or None
        self.version: str | None = None
        self.dbd_version: str | None = None
        self.excluded_nodes_field: str | None = None  # "list", "string" or None (no REST form)
        self.requeue_path: str | None = None  # "/slurm/vX/job/{job_id}/requeue" (v0.0.45+) or None
        self.jobs_parser = JobsParser()
        self._client: httpx.AsyncClient | None = None
        self._discover_lock = asyncio.Lock()
        self.last_result: CommandResult | None = None

    # ------------------------------------------------------------ plumbing

    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            transport = httpx.AsyncHTTPTransport(uds=self.socket) if self.socket else None
            self._client = httpx.AsyncClient(base_url=self.base_url, transport=transport, timeout=self.timeout)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.tokens is not None:
            token = self.tokens.token()
            headers["X-SLURM-USER-NAME"] = token.user
            headers["X-SLURM-USER-TOKEN"] = token.value
        return headers

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | None = None,
        params: dict[str, str] | None = None,
        decode: Callable[[bytes], dict[str, Any]] = load_json,
    ) -> tuple[dict, CommandResult]:
        """One HTTP request; Slurm's `errors` become the classified SchedulerError, as the CLI adapter's stderr."""
        command = (method, self.base_url + path + (f"?{urlencode(params)}" if params else ""))
        started = time.monotonic()
        try:
            response = await self.client().request(method, path, headers=self._headers(), json=body, params=params)
        except httpx.TimeoutException:
            raise TransientSchedulerError(
                f"timed out after {self.timeout:g}s", command=command, duration=time.monotonic() - started
            ) from None
        except httpx.HTTPError as exc:
            raise TransientSchedulerError(
                f"slurmrestd unreachable: {exc}", command=command, duration=time.monotonic() - started
            ) from None
        duration = time.monotonic() - started
        try:
            # JSON answers are parsed as squeue's are (GC paused), once; the bulk jobs answer incrementally
            data: dict | None = decode(response.content)
        except ParseError:
            data = None
        errors = _error_texts(data)
        result = CommandResult(
            command=command,
            returncode=response.status_code,
            stdout=response.text if data is None else "",
            stderr="\n".join(errors),
            duration=duration,
        )
        self.last_result = result
        if errors:
            raise classify(command, response.status_code, "\n".join(errors), duration=duration)
        if response.status_code in (401, 403):
            raise TransientSchedulerError(
                f"slurmrestd refused the credentials (HTTP {response.status_code}): {response.text[:200]}",
                command=command,
                returncode=response.status_code,
                duration=duration,
            )
        if response.status_code == 404 and "/job/" in path:
            raise JobNotFound("invalid job id specified", command=command, returncode=404, duration=duration)
        if response.status_code >= 400 or not isinstance(data, dict):
            raise TransientSchedulerError(
                f"slurmrestd answered HTTP {response.status_code}",
                command=command,
                returncode=response.status_code,
                stderr=response.text[:2000],
                duration=duration,
            )
        return data, result

    async def discover(self) -> str:
        """The API version to use (and what its job update accepts), from the server's OpenAPI description."""
        if self.version is not None:
            return self.version
        async with self._discover_lock:
            if self.version is not None:
                return self.version
            spec, _ = await self.request("GET", "/openapi/v3")
            version, self.dbd_version, self.excluded_nodes_field = choose_versions(spec, self.forced_version)
            self.requeue_path = requeue_path(spec, version)
            self.version = version
            return version

    # ------------------------------------------------------------ Scheduler

    async def list_jobs(self) -> Snapshot:
        version = await self.discover()
        taken_at = datetime.now(UTC)
        # An answer with Slurm errors (slurmctld down: "Unable to contact slurm controller") raises
        # the classified error, so an outage is "could not observe", never "every job is gone".
        data, result = await self.request("GET", f"/slurm/{version}/jobs", decode=decode_jobs_answer)
        try:
            # a record unchanged since the last tick keeps its parsed job (app.slurm.incremental)
            return self.jobs_parser.parse(data, taken_at=taken_at, duration=result.duration)
        except ParseError as exc:
            raise TransientSchedulerError(f"unreadable slurmrestd jobs answer: {exc}", command=result.command) from None

    async def requeue_hold(self, job: JobTarget) -> CommandResult:
        await self.discover()
        if self.requeue_path is None:  # before v0.0.45 no slurmrestd version has a requeue operation
            return await self._without_rest_form("requeue_hold", job, lambda cli: cli.requeue_hold(job))
        path = self.requeue_path.replace("{job_id}", target_text(job))
        data, result = await self.request("GET", path, params={"Hold": "true"})
        _raise_for_status_entries(data, result)
        return result

    async def set_excluded_nodes(self, job: JobTarget, nodes: Sequence[str]) -> CommandResult:
        await self.discover()
        if self.excluded_nodes_field is None:
            return await self._without_rest_form(
                "set_excluded_nodes", job, lambda cli: cli.set_excluded_nodes(job, nodes)
            )
        value: Any = list(nodes) if self.excluded_nodes_field == "list" else ",".join(nodes)
        return await self._update(job, {"excluded_nodes": value}, lambda seen: set(seen.excluded_nodes) == set(nodes))

    async def release(self, job: JobTarget) -> CommandResult:
        return await self._update(job, {"hold": False}, lambda seen: not seen.held)

    async def _update(self, job: JobTarget, body: dict[str, Any], took_effect: Any) -> CommandResult:
        """POST /slurm/vX/job/{id}; for an array task, 22.05's answer may claim failure after success.

        slurmrestd v0.0.36-v0.0.38 answer "job array update from ... failed" to every update named
        `<array id>_<task id>` although slurmctld applied it (its log: "_slurm_rpc_update_job:
        complete JobId=52_2"). Then the adapter looks at the job once (the bulk listing) and
        reports success when the change shows, else the error as transient.
        """
        version = await self.discover()
        text = target_text(job)
        if "_" in text and _minor(version) >= 40:
            # v0.0.40+: no job update of one array task over REST (the array id would change them all)
            return await self._without_rest_form("update of an array task", job, self.fallback_for_update(job, body))
        try:
            data, result = await self.request("POST", f"/slurm/{version}/job/{text}", body=body)
            _raise_for_status_entries(data, result)
        except SchedulerError as exc:
            if "_" in text and _TASK_UPDATE_REJECTED in exc.stderr:
                # a version we have not seen that refuses it as v0.0.40-v0.0.45 do
                run = self.fallback_for_update(job, body)
                return await self._without_rest_form("update of an array task", job, run)
            if not isinstance(exc, TransientSchedulerError):
                raise
            if "_" not in text or "job array update" not in exc.stderr:
                raise
            seen = next((j for j in (await self.list_jobs()).jobs if j.scheduler_id == text), None)
            if seen is None or not took_effect(seen):
                raise
            return CommandResult(
                command=exc.command,
                returncode=exc.returncode or 200,
                stdout="",
                stderr=f"slurmrestd reported {exc.stderr.strip()!r}, but the job shows the change",
                duration=exc.duration or 0.0,
            )
        return result

    @staticmethod
    def fallback_for_update(job: JobTarget, body: dict[str, Any]) -> Any:
        """The scontrol form of a job update body (release or excluded nodes), for the CLI fallback."""
        if "excluded_nodes" in body:
            value = body["excluded_nodes"]
            nodes = list(value) if isinstance(value, list) else [n for n in str(value).split(",") if n]
            return lambda cli: cli.set_excluded_nodes(job, nodes)
        return lambda cli: cli.release(job)

    async def cancel(self, job: JobTarget) -> CommandResult:
        version = await self.discover()
        try:
            data, result = await self.request("DELETE", f"/slurm/{version}/job/{target_text(job)}")
            _raise_for_status_entries(data, result)  # v0.0.40+: "already completing or completed" inside a 200
        except JobStateConflict as exc:
            if "already completing or completed" in exc.stderr.lower():
                return self.last_result or CommandResult(("DELETE",), 200, "", exc.stderr, exc.duration or 0.0)
            raise
        return result

    async def job_history(self, job_id: int) -> list[AccountingRecord] | None:
        await self.discover()
        job_id = int(job_id)
        if self.dbd_version is not None:
            data, _ = await self.request("GET", f"/slurmdb/{self.dbd_version}/job/{job_id}")
            return [record for record in parse_sacct_json(data) if record.job_id == job_id]
        if self.fallback is not None:
            return await self.fallback.job_history(job_id)
        return None

    async def lookup_job(self, job_id: int) -> JobLookup:
        version = await self.discover()
        job_id = int(job_id)
        job = None
        try:
            data, _ = await self.request("GET", f"/slurm/{version}/job/{job_id}")
            job = parse_snapshot(data).get(job_id)
        except JobNotFound:
            job = None
        except ParseError as exc:
            raise TransientSchedulerError(f"unreadable slurmrestd job answer: {exc}") from None
        history = await self.job_history(job_id)
        return JobLookup(job_id=job_id, job=job, history=tuple(history) if history is not None else None)

    async def partition_nodes(self, partition: str) -> tuple[str, ...] | None:
        version = await self.discover()
        data, _ = await self.request("GET", f"/slurm/{version}/nodes")
        try:
            return parse_partition_nodes(data, partition)
        except ParseError as exc:
            raise TransientSchedulerError(f"unreadable slurmrestd nodes answer: {exc}") from None

    async def drain_node(self, node: str, reason: str) -> CommandResult:
        """Drain a node through the scontrol fallback (app/fleet's drainer; slurmrestd's node update is not used)."""
        if self.fallback is None:
            raise RestUnsupported(
                "draining a node needs scontrol and RECOVERY_SLURMRESTD_CLI_FALLBACK is off",
                command=("slurmrestd", "drain", node),
            )
        return await self.fallback.drain_node(node, reason)

    async def node_drained(self, node: str) -> bool:
        """Whether Slurm shows the node drained (through the same scontrol fallback's sinfo)."""
        if self.fallback is None:
            raise RestUnsupported("RECOVERY_SLURMRESTD_CLI_FALLBACK is off", command=("slurmrestd", "sinfo", node))
        return await self.fallback.node_drained(node)

    async def _without_rest_form(self, action: str, job: JobTarget, run: Any) -> CommandResult:
        if self.fallback is None:
            raise RestUnsupported(
                f"slurmrestd {self.version or ''} has no form for {action} and RECOVERY_SLURMRESTD_CLI_FALLBACK is off",
                command=("slurmrestd", action, target_text(job)),
            )
        scontrol = self.fallback.binary("scontrol")
        if not (os.path.isfile(scontrol) and os.access(scontrol, os.X_OK)) and not shutil.which(scontrol):
            # e.g. Slinky without Slurm's client commands: retrying would never help
            raise RestUnsupported(
                f"slurmrestd {self.version or ''} has no form for {action} and scontrol is not installed here "
                "(install Slurm's client commands, or set RECOVERY_SLURM_BIN_DIR)",
                command=("slurmrestd", action, target_text(job)),
            )
        result: CommandResult = await run(self.fallback)
        return result


def choose_versions(spec: dict, forced: str | None = None) -> tuple[str, str | None, str | None]:
    """(slurm API version, slurmdb API version or None, how its job update takes excluded_nodes) from OpenAPI."""
    paths = spec.get("paths") if isinstance(spec, dict) else None
    if not isinstance(paths, dict):
        raise TransientSchedulerError("slurmrestd's /openapi/v3 has no paths")
    offered = {match.group(1) for path in paths if (match := _VERSION_PATH.match(path))}
    usable = sorted(offered & set(KNOWN_VERSIONS), key=lambda v: int(v.rsplit(".", 1)[1]))
    if forced:
        if forced not in offered:
            raise RestVersionUnsupported(
                f"slurmrestd offers {', '.join(sorted(offered)) or 'no job API'}, not {forced}",
                command=("GET", "/openapi/v3"),
            )
        version = forced
    elif usable:
        version = usable[-1]
    elif offered:
        raise RestVersionUnsupported(
            f"slurmrestd offers {', '.join(sorted(offered, key=_minor))}; Recovery reads {KNOWN_VERSIONS[0]} to "
            f"{KNOWN_VERSIONS[-1]} (have slurmrestd load an older data_parser plugin with -s/-d, "
            "or use RECOVERY_SLURM_API=cli)",
            command=("GET", "/openapi/v3"),
        )
    else:
        raise TransientSchedulerError(
            "slurmrestd offers no /slurm/v0.0.NN/jobs endpoint (openapi/slurmctld not loaded?)"
        )
    dbd = sorted(
        {match.group(1) for path in paths if (match := _DBD_PATH.match(path))},
        key=lambda v: int(v.rsplit(".", 1)[1]),
    )
    return version, (dbd[-1] if dbd else None), _excluded_nodes_field(spec, paths, version)


def _minor(version: str) -> int:
    return int(version.rsplit(".", 1)[1])


def requeue_path(spec: dict, version: str) -> str | None:
    """The version's requeue operation (`GET /slurm/vX/job/{job_id}/requeue`, v0.0.45+), or None when it has none."""
    paths = spec.get("paths") if isinstance(spec, dict) else None
    for path in (f"/slurm/{version}/job/{{job_id}}/requeue", f"/slurm/{version}/job/{{job_id}}/requeue/"):
        item = paths.get(path) if isinstance(paths, dict) else None
        if isinstance(item, dict) and "get" in item:
            return path
    return None


def _entry_errors(data: dict) -> list[str]:
    """Per-job errors inside an HTTP 200: `status` (requeue, cancel) or `results` (update) items, in either shape
    slurmrestd uses: {error: "text", error_code: N} (requeue, update) or {error: {code: N, string: "text"}} (cancel)."""
    texts = []
    for key in ("status", "results"):
        items = data.get(key)
        for item in items if isinstance(items, list) else ():
            if not isinstance(item, dict):
                continue
            error = item.get("error")
            if isinstance(error, dict):
                code, text = error.get("code"), error.get("string") or error.get("message")
            else:
                code, text = item.get("error_code"), error
            if code not in (None, 0):
                texts.append(str(text or f"error {code}"))
    return texts


def _raise_for_status_entries(data: dict, result: CommandResult) -> None:
    """Raise the classified error of an answer's per-job errors (see _entry_errors)."""
    texts = _entry_errors(data)
    if texts:
        raise classify(result.command, result.returncode, "\n".join(texts), duration=result.duration)


def _excluded_nodes_field(spec: dict, paths: dict, version: str) -> str | None:
    post = (paths.get(f"/slurm/{version}/job/{{job_id}}") or paths.get(f"/slurm/{version}/job/{{job_id}}/") or {}).get(
        "post"
    ) or {}
    schema = ((post.get("requestBody") or {}).get("content") or {}).get("application/json", {}).get("schema") or {}
    properties = _properties(spec, schema)
    if "job" in properties and "excluded_nodes" not in properties:  # a {"job": {...}} wrapper
        properties = _properties(spec, properties["job"])
    field = properties.get("excluded_nodes")
    if field is None:
        return None
    field = _resolve(spec, field)
    return "list" if field.get("type") == "array" else "string"


def _resolve(spec: dict, schema: dict) -> dict:
    for _ in range(10):
        ref = schema.get("$ref") if isinstance(schema, dict) else None
        if not ref:
            break
        node: Any = spec
        for part in ref.lstrip("#/").split("/"):
            node = node.get(part, {}) if isinstance(node, dict) else {}
        schema = node
    return schema if isinstance(schema, dict) else {}


def _properties(spec: dict, schema: dict) -> dict:
    resolved = _resolve(spec, schema)
    props = dict(resolved.get("properties") or {})
    for part in resolved.get("allOf") or ():
        props.update(_properties(spec, part))
    return props


def _error_texts(data: Any) -> list[str]:
    """Slurm's error messages of an answer (`errors` items are {error, description, error_number})."""
    if not isinstance(data, dict):
        return []
    texts = []
    for item in data.get("errors") or ():
        if isinstance(item, dict):
            parts = [str(item.get(key)) for key in ("error", "description") if item.get(key)]
            texts.append(": ".join(parts) or json.dumps(item))
        elif isinstance(item, str):
            texts.append(item)
    return texts
