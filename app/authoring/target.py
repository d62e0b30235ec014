"""What check-script and check-policy judge against: --environment/--partitions, a running service (--server), this
machine's RECOVERY_ENVIRONMENT, or nothing (then they say so and assume the policy's own environment)."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from app.domain.admission.policy import parse_comment
from app.infra.config import Settings, SettingsError

SERVER_ENV = "RECOVERY_HTTP_URL"  # the user guide's names
TOKEN_ENV = "RECOVERY_ACCESS_TOKEN"


@dataclass(frozen=True)
class Target:
    """The installation a check judges against, and where its environment and partitions came from."""

    settings: Settings
    source: str
    known: bool  # False: neither given nor asked for; the verdict assumes a matching installation

    def to_dict(self) -> dict[str, Any]:
        return {
            "environment": self.settings.environment,
            "managed_partitions": list(self.settings.managed_partitions),
            "source": self.source,
            "known": self.known,
        }

    def sentence(self) -> str:
        parts = f"environment {self.settings.environment!r}, partitions {', '.join(self.settings.managed_partitions)}"
        if self.known:
            return f"Judged against {parts} ({self.source})."
        return (
            f"Judged WITHOUT knowing the installation ({self.source}): assumed {parts}. Pass --environment and "
            f"--partitions, or --server URL (or {SERVER_ENV}) to ask a running service."
        )


def ask_server(url: str, token: str | None, *, timeout: float = 10.0) -> dict[str, Any]:
    """GET <url>/v1/installation: the service's environment and managed partitions (SettingsError on failure)."""
    import httpx

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        response = httpx.get(url.rstrip("/") + "/v1/installation", headers=headers, timeout=timeout)
    except httpx.HTTPError as exc:
        raise SettingsError(f"--server {url}: cannot reach the service ({exc})") from None
    if response.status_code in (401, 403):
        raise SettingsError(f"--server {url}: {response.status_code}; pass a token with --token or {TOKEN_ENV}")
    if response.status_code != 200:
        raise SettingsError(f"--server {url}: answered {response.status_code} for /v1/installation")
    try:
        body = response.json()
        return {"environment": str(body["environment"]), "managed_partitions": tuple(body["managedPartitions"])}
    except (ValueError, KeyError, TypeError):
        raise SettingsError(f"--server {url}: /v1/installation did not answer as a Recovery service") from None


def resolve(
    settings: Settings,
    *,
    environment: str | None = None,
    partitions: str | None = None,
    server: str | None = None,
    token: str | None = None,
    comment: str | None = None,
    env: dict[str, str] | None = None,
) -> Target:
    """The Target from the flags, the service, this machine's settings, or (none of them) the policy itself."""
    env = dict(os.environ) if env is None else env
    server = server or env.get(SERVER_ENV) or None
    values: dict[str, Any] = {}
    sources: list[str] = []
    if server:
        values.update(ask_server(server, token or env.get(TOKEN_ENV)))
        sources.append(f"asked the service at {server}")
    if environment:
        values["environment"] = environment
        sources.append("--environment")
    if partitions:
        values["managed_partitions"] = tuple(p.strip() for p in partitions.split(",") if p.strip()) or ("*",)
        sources.append("--partitions")
    if values:
        return Target(dataclasses.replace(settings, **values), ", ".join(sources), True)
    if env.get("RECOVERY_ENVIRONMENT"):
        return Target(settings, "this machine's RECOVERY_ENVIRONMENT and RECOVERY_MANAGED_PARTITIONS", True)
    # Nothing known (a laptop): judge everything else and assume the installation matches the policy.
    result = parse_comment(comment)
    wanted = result.policy.environment if result.policy is not None and result.policy.environment else None
    assumed = dataclasses.replace(settings, environment=wanted or settings.environment, managed_partitions=("*",))
    return Target(assumed, "no --environment, --partitions or --server given", False)
