"""Verifies OIDC access tokens (JWTs) against the issuer's JWKS and turns them into Principals."""

from __future__ import annotations

import ipaddress
import json
import logging
import re
import time
import warnings
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import httpx
from joserfc import jws
from joserfc.errors import JoseError, SecurityWarning

from app.auth.keys import _KEY_TYPE_OF_ALG, JwksCache
from app.auth.principal import AuthError, Principal, collector_from_claims, principal_from_claims, shown
from app.infra.config import Settings, SettingsError

log = logging.getLogger("recovery.auth")

LEEWAY_SECONDS = 30.0
MAX_TOKEN_BYTES = 16 * 1024
ACCEPTED_TYPES = frozenset({"jwt", "at+jwt"})  # RFC 7519 and RFC 9068 access tokens; absent is fine too
_B64URL_PART = re.compile(r"^[A-Za-z0-9_-]*$")


def allowed_algorithms(configured: Iterable[str]) -> frozenset[str]:
    """The asymmetric signature algorithms from settings; `none` and HMAC are refused outright."""
    algorithms = set()
    for alg in configured:
        if alg.lower() == "none" or alg.upper().startswith("HS"):
            raise SettingsError(
                f"RECOVERY_OIDC_ALGORITHMS: {alg} is never accepted (unsigned or HMAC tokens would let "
                "anyone who knows the public key forge them)"
            )
        if alg not in _KEY_TYPE_OF_ALG:
            supported = ", ".join(sorted(_KEY_TYPE_OF_ALG))
            raise SettingsError(f"RECOVERY_OIDC_ALGORITHMS: unsupported algorithm {alg!r}; use some of {supported}")
        algorithms.add(alg)
    if not algorithms:
        raise SettingsError("RECOVERY_OIDC_ALGORITHMS is empty: no token could ever verify")
    return frozenset(algorithms)


class TokenVerifier:
    """Checks bearer tokens: signature by the issuer's JWKS, iss, aud, exp/nbf/iat, algorithm, type and role."""

    requires_token = True

    def __init__(
        self,
        settings: Settings,
        *,
        http: httpx.AsyncClient | None = None,
        leeway: float = LEEWAY_SECONDS,
        min_refetch_interval: float = 30.0,
        max_jwks_age: float = 3600.0,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if not settings.oidc_issuer:
            raise SettingsError("RECOVERY_OIDC_ISSUER is not set: bearer tokens cannot be verified without an issuer")
        if not settings.oidc_audience:
            raise SettingsError("RECOVERY_OIDC_AUDIENCE is empty: tokens meant for other services would be accepted")
        self.issuer = settings.oidc_issuer
        self.audience = settings.oidc_audience
        self.roles_claim = settings.oidc_roles_claim or "roles"
        self.algorithms = allowed_algorithms(settings.oidc_algorithms)
        self.leeway = leeway
        self._clock = clock
        self._owns_http = http is None
        self._http = http or httpx.AsyncClient(timeout=httpx.Timeout(10.0), follow_redirects=False)
        self.keys = JwksCache(
            self.issuer,
            self._http,
            min_refetch_interval=min_refetch_interval,
            max_age=max_jwks_age,
            monotonic=monotonic,
        )
        _warn_if_plain_http(self.issuer)

    async def aclose(self) -> None:
        """Close the HTTP client if this verifier created it."""
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> TokenVerifier:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def verify(self, token: str) -> Principal:
        """The Principal of a valid access token; AuthError(401/403/503) saying what is wrong otherwise."""
        return principal_from_claims(await self._verified_claims(token), self.roles_claim)

    async def verify_collector(self, token: str) -> str:
        """The collector name (subject) of a valid token holding the `collector` role; AuthError(401/403) else."""
        return collector_from_claims(await self._verified_claims(token), self.roles_claim)

    async def _verified_claims(self, token: str) -> dict[str, Any]:
        signed, header = self._parse(token)
        alg = header["alg"]
        key = await self.keys.key_for(header.get("kid"), alg)
        try:
            with warnings.catch_warnings():
                # joserfc flags "EdDSA" as deprecated by RFC 9864 (in favour of "Ed25519"); issuers still use it.
                warnings.simplefilter("ignore", SecurityWarning)
                # Unknown non-critical header parameters are allowed (RFC 7515 §4); `crit` is still enforced.
                registry = jws.JWSRegistry(algorithms=[alg], strict_check_header=False)
                valid = jws.validate_compact(signed, key, registry=registry)
        except JoseError as exc:
            raise AuthError(401, f"token signature cannot be checked: {exc.description or exc.error}") from None
        if not valid:
            raise AuthError(401, "token signature is invalid")
        claims = self._claims(signed.payload)
        self._check_claims(claims)
        return claims

    def _parse(self, token: str) -> tuple[Any, dict[str, Any]]:
        """Split and decode the token, refusing a bad algorithm or type before any key is looked at."""
        if not isinstance(token, str) or not token.strip():
            raise AuthError(401, "empty bearer token")
        if len(token) > MAX_TOKEN_BYTES:
            raise AuthError(401, f"token is larger than {MAX_TOKEN_BYTES} bytes")
        parts = token.split(".")
        if len(parts) == 5:
            raise AuthError(401, "encrypted tokens (JWE) are not supported; expected a signed JWT")
        if len(parts) != 3 or not all(_B64URL_PART.match(part) for part in parts) or not parts[0] or not parts[1]:
            raise AuthError(401, "malformed token: expected a signed JWT (three base64url parts separated by dots)")
        try:
            signed = jws.extract_compact(token.encode("ascii"))
            header = signed.headers()
        except (JoseError, ValueError, TypeError, AttributeError, RecursionError) as exc:
            raise AuthError(401, f"malformed token: {type(exc).__name__}") from None
        if not isinstance(header, dict):
            raise AuthError(401, "malformed token: its header is not a JSON object")
        alg = header.get("alg")
        if not isinstance(alg, str) or not alg:
            raise AuthError(401, "token header has no alg")
        if alg.lower() == "none":
            raise AuthError(401, "unsigned tokens (alg none) are never accepted")
        if alg.upper().startswith("HS"):
            named = alg if alg in ("HS256", "HS384", "HS512") else shown(alg)
            raise AuthError(
                401, f"HMAC-signed tokens ({named}) are never accepted; the issuer must sign with an asymmetric key"
            )
        if alg not in self.algorithms:
            named = alg if alg in _KEY_TYPE_OF_ALG else shown(alg)
            allowed = ", ".join(sorted(self.algorithms))
            raise AuthError(401, f"token algorithm {named} is not allowed (allowed: {allowed})")
        typ = header.get("typ")
        if typ is not None and (
            not isinstance(typ, str) or typ.lower().removeprefix("application/") not in ACCEPTED_TYPES
        ):
            raise AuthError(401, f"token type {shown(typ)} is not an access token (expected JWT or at+jwt)")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise AuthError(401, "token header kid is not a string")
        return signed, header

    def _claims(self, payload: bytes) -> dict[str, Any]:
        try:
            claims = json.loads(payload)
        except ValueError:
            raise AuthError(401, "token payload is not JSON") from None
        if not isinstance(claims, dict):
            raise AuthError(401, "token payload is not a JSON object")
        return claims

    def _check_claims(self, claims: dict[str, Any]) -> None:
        if claims.get("iss") != self.issuer:
            raise AuthError(401, f"token issuer {claims.get('iss')!r} is not the configured issuer {self.issuer!r}")
        audience = claims.get("aud")
        audiences = [audience] if isinstance(audience, str) else audience if isinstance(audience, list) else []
        if self.audience not in audiences:
            raise AuthError(401, f"token audience {audience!r} does not include {self.audience!r}")
        now = self._clock()
        exp = _numeric_date(claims, "exp", required=True)
        if exp is not None and now > exp + self.leeway:
            raise AuthError(401, f"token expired at {_iso(exp)}")
        nbf = _numeric_date(claims, "nbf")
        if nbf is not None and now < nbf - self.leeway:
            raise AuthError(401, f"token not valid before {_iso(nbf)}")
        iat = _numeric_date(claims, "iat")
        if iat is not None and now < iat - self.leeway:
            raise AuthError(401, f"token issued in the future ({_iso(iat)}); check the clocks")


def _numeric_date(claims: dict[str, Any], name: str, *, required: bool = False) -> float | None:
    value = claims.get(name)
    if value is None:
        if required:
            raise AuthError(401, f"token has no {name} claim")
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise AuthError(401, f"token {name} claim is not a number")
    return float(value)


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, tz=UTC).isoformat(timespec="seconds")


def _warn_if_plain_http(issuer: str) -> None:
    parts = urlsplit(issuer)
    if parts.scheme == "https":
        return
    host = parts.hostname or ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        log.warning("OIDC issuer %s is not https: its keys can be tampered with in transit", issuer)
