"""pytest plugin: a real OIDC provider (tests/oidc/provider.mjs, npm oidc-provider) on a free loopback port.

Fixture `oidc_provider` (session scope) yields an `OidcProvider`. Tests that use it carry the `oidc` marker.
Also here: `start_oidc_provider()` for a private instance (e.g. to rotate its keys), and helpers that forge
tokens for negative tests.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import shutil
import socket
import subprocess
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import httpx
import pytest
from joserfc import jwt
from joserfc.jwk import RSAKey

from app.infra.config import Settings
from tests.plugins import require

OIDC_DIR = Path(__file__).resolve().parents[1] / "oidc"
AUDIENCE = "recovery"
DASHBOARD_CLIENT_ID = "recovery-dashboard"
CLIENT_SECRETS = {
    "viewer-client": "viewer-secret",
    "operator-client": "operator-secret",
    "norole-client": "norole-secret",
}
DEFAULT_REDIRECT_URI = "http://127.0.0.1:8000/dashboard/auth/callback"  # any loopback port works (native client)
MIN_NODE_MAJOR = 20
START_TIMEOUT = 30.0


def _unavailable(reason: str) -> NoReturn:
    """Fail in CI (it must install node), skip elsewhere; either way say exactly why."""
    require("the OIDC provider", reason)


def _check_node() -> str:
    """The node executable, after making sure node/npm exist, are new enough and node_modules is installed."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        _unavailable(f"{'node' if not node else 'npm'} not found on PATH (install Debian's nodejs and npm)")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=False).stdout.strip()
    major = int(version.lstrip("v").split(".")[0]) if version.lstrip("v")[:1].isdigit() else 0
    if major < MIN_NODE_MAJOR:
        _unavailable(
            f"node {version or '(unknown version)'} is older than v{MIN_NODE_MAJOR}, which oidc-provider needs"
        )
    if not (OIDC_DIR / "node_modules" / "oidc-provider").is_dir():
        command = ["npm", "ci"] if (OIDC_DIR / "package-lock.json").exists() else ["npm", "install"]
        done = subprocess.run(
            [npm, *command[1:], "--no-audit", "--no-fund"], cwd=OIDC_DIR, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            pytest.fail(f"`{' '.join(command)}` in {OIDC_DIR} failed:\n{done.stdout}\n{done.stderr}", pytrace=False)
    return node


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def new_signing_key() -> RSAKey:
    """A fresh RS256 key with a random kid, as the provider publishes them."""
    return RSAKey.generate_key(2048, parameters={"kid": str(uuid.uuid4()), "alg": "RS256", "use": "sig"})


@dataclass
class OidcProvider:
    """A running provider: issuer URL, tokens for the test clients, its signing keys, rotation, stop()."""

    issuer: str
    port: int
    process: subprocess.Popen[bytes]
    keys_file: Path
    log_path: Path
    admin_token: str
    keys: list[RSAKey] = field(default_factory=list)
    audience: str = AUDIENCE
    dashboard_client_id: str = DASHBOARD_CLIENT_ID

    @property
    def signing_key(self) -> RSAKey:
        """The private key the provider signs with now (the first of its keys)."""
        return self.keys[0]

    @property
    def jwks_uri(self) -> str:
        return f"{self.issuer}/jwks"

    def settings(self, **overrides: Any) -> Settings:
        """Settings that point the service at this provider."""
        values: dict[str, Any] = {
            "oidc_issuer": self.issuer,
            "oidc_audience": self.audience,
            "oidc_client_id": self.dashboard_client_id,
        }
        return Settings.build(**(values | overrides))

    def token(self, client: str = "viewer-client") -> str:
        """A JWT access token for `client` by the client_credentials grant (viewer-, operator- or norole-client)."""
        response = httpx.post(
            f"{self.issuer}/token",
            data={"grant_type": "client_credentials"},
            auth=(client, CLIENT_SECRETS[client]),
            timeout=10,
        )
        response.raise_for_status()
        return response.json()["access_token"]

    def login(self, authorize_url: str, username: str, *, client: httpx.Client | None = None) -> str:
        """Log `username` in through the dev interactions of an authorization URL; returns the redirect to the app.

        Usernames starting with "operator" get the operator role, everyone else viewer. The returned URL is
        the app's callback with `code`, `state` and `iss`; pass `client` to keep the provider's cookies.
        """
        own = client is None
        http = client or httpx.Client(follow_redirects=False, timeout=10)
        try:
            url = authorize_url
            for _ in range(10):
                response = (
                    http.get(url)
                    if "/interaction/" not in url
                    else http.post(url, data={"prompt": "login", "login": username, "password": "any"})
                )
                if response.status_code not in (302, 303):
                    raise AssertionError(f"{url} answered {response.status_code}: {response.text[:500]}")
                url = urllib.parse.urljoin(url, response.headers["location"])
                if not url.startswith(self.issuer + "/"):
                    return url
            raise AssertionError("too many redirects at the OIDC provider")
        finally:
            if own:
                http.close()

    def authorization_code_tokens(self, username: str, redirect_uri: str = DEFAULT_REDIRECT_URI) -> dict[str, Any]:
        """The token response of a complete authorization code + PKCE login as the dashboard client."""
        verifier = secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        query = urllib.parse.urlencode(
            {
                "client_id": self.dashboard_client_id,
                "response_type": "code",
                "scope": "openid profile email roles",
                "redirect_uri": redirect_uri,
                "code_challenge": challenge,
                "code_challenge_method": "S256",
                "state": secrets.token_urlsafe(8),
                "nonce": secrets.token_urlsafe(8),
            }
        )
        callback = self.login(f"{self.issuer}/auth?{query}", username)
        code = urllib.parse.parse_qs(urllib.parse.urlsplit(callback).query)["code"][0]
        response = httpx.post(
            f"{self.issuer}/token",
            timeout=10,
            data={
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": redirect_uri,
                "code_verifier": verifier,
                "client_id": self.dashboard_client_id,
            },
        )
        response.raise_for_status()
        return response.json()

    def valid_claims(self, **overrides: Any) -> dict[str, Any]:
        """Claims of a token that this provider could have issued to operator-client; override to break one."""
        now = int(time.time())
        claims = {
            "iss": self.issuer,
            "aud": self.audience,
            "sub": "operator-client",
            "client_id": "operator-client",
            "iat": now,
            "exp": now + 300,
            "jti": secrets.token_urlsafe(8),
            "roles": ["operator"],
        }
        return claims | overrides

    def sign(self, claims: dict[str, Any], *, key: RSAKey | None = None, header: dict[str, Any] | None = None) -> str:
        """A token with `claims` signed by the provider's own key (or `key`), header kid/alg/typ as the provider's."""
        key = key or self.signing_key
        protected = {"alg": "RS256", "typ": "at+jwt", "kid": key.kid} | (header or {})
        return jwt.encode(protected, claims, key, algorithms=[protected["alg"]])

    def rotate_keys(self, *, keep_old: bool = True) -> RSAKey:
        """Make the provider sign with a new key (old one still published when keep_old); returns the new key."""
        new = new_signing_key()
        self.keys = [new, *self.keys[:1]] if keep_old else [new]
        _write_keys(self.keys_file, self.keys)
        response = httpx.post(
            f"{self.issuer}/__admin/reload-keys", headers={"Authorization": f"Bearer {self.admin_token}"}, timeout=10
        )
        response.raise_for_status()
        return new

    def stop(self) -> None:
        """End the provider process (ours, by pid) and wait for it."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def _write_keys(path: Path, keys: list[RSAKey]) -> None:
    path.write_text(json.dumps({"keys": [key.as_dict(private=True) for key in keys]}))
    path.chmod(0o600)


def start_oidc_provider(workdir: Path, *, env: dict[str, str] | None = None, attempts: int = 3) -> OidcProvider:
    """Start tests/oidc/provider.mjs on a free loopback port and wait until its discovery document answers.

    `env` adds provider settings (OIDC_REDIRECT_URIS, OIDC_TOKEN_TTL, ...; see provider.mjs). The caller must stop() it.
    """
    node = _check_node()
    workdir.mkdir(parents=True, exist_ok=True)
    last_log = ""
    for attempt in range(attempts):  # noqa: B007 - the error message names the last try
        port = _free_port()
        keys = [new_signing_key()]
        keys_file = workdir / f"keys-{port}.json"
        _write_keys(keys_file, keys)
        admin_token = secrets.token_urlsafe(24)
        log_path = workdir / f"provider-{port}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [node, str(OIDC_DIR / "provider.mjs")],
                cwd=OIDC_DIR,
                env={
                    **os.environ,
                    **(env or {}),
                    "OIDC_PORT": str(port),
                    "OIDC_KEYS_FILE": str(keys_file),
                    "OIDC_ADMIN_TOKEN": admin_token,
                },
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        provider = OidcProvider(
            issuer=f"http://127.0.0.1:{port}",
            port=port,
            process=process,
            keys_file=keys_file,
            log_path=log_path,
            admin_token=admin_token,
            keys=keys,
        )
        if _wait_for_discovery(provider):
            return provider
        provider.stop()
        last_log = provider.log()
        if "EADDRINUSE" not in last_log:  # only a port race is worth another try
            break
    raise RuntimeError(f"the OIDC provider did not start (attempt {attempt + 1}); its output:\n{last_log}")


def _wait_for_discovery(provider: OidcProvider) -> bool:
    deadline = time.monotonic() + START_TIMEOUT
    url = f"{provider.issuer}/.well-known/openid-configuration"
    while time.monotonic() < deadline:
        if provider.process.poll() is not None:
            return False
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    return False


@pytest.fixture(scope="session")
def oidc_provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OidcProvider]:
    """A real OIDC provider for the whole session (fails in CI without node/npm, skips elsewhere)."""
    provider = start_oidc_provider(tmp_path_factory.mktemp("oidc"))
    try:
        yield provider
    finally:
        provider.stop()


# ---- forged tokens for negative tests ---------------------------------------------------------------


def b64url(data: bytes | str | dict[str, Any]) -> str:
    """base64url without padding, of bytes, text or a JSON object."""
    if isinstance(data, dict):
        data = json.dumps(data, separators=(",", ":"))
    if isinstance(data, str):
        data = data.encode()
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forge_unsigned(claims: dict[str, Any], kid: str | None = None) -> str:
    """An `alg: none` token (no signature)."""
    header = {"alg": "none", "typ": "JWT"} | ({"kid": kid} if kid else {})
    return f"{b64url(header)}.{b64url(claims)}."


def forge_hmac_with_public_key(claims: dict[str, Any], public_key: RSAKey) -> str:
    """An HS256 token whose HMAC secret is the issuer's public key PEM: the classic algorithm confusion attack."""
    secret = public_key.as_pem(private=False)
    header = {"alg": "HS256", "typ": "JWT", "kid": public_key.kid}
    signing_input = f"{b64url(header)}.{b64url(claims)}"
    signature = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64url(signature)}"


def tamper_signature(token: str) -> str:
    """The same token with one bit of its signature flipped."""
    head, payload, signature = token.split(".")
    raw = bytearray(base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4)))
    raw[len(raw) // 2] ^= 0x01
    return f"{head}.{payload}.{b64url(bytes(raw))}"


def tamper_payload(token: str, **changes: Any) -> str:
    """The same header and signature over a changed payload (e.g. roles raised to operator)."""
    head, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return f"{head}.{b64url(claims | changes)}.{signature}"
