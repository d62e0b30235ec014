"""The issuer's signing keys: discovery, JWKS fetch, cache and rate-limited refetch on key rotation."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import httpx
from joserfc.errors import JoseError
from joserfc.jwk import JWKRegistry, Key

from app.auth.principal import AuthError, shown

log = logging.getLogger("recovery.auth")

# Which JWK key type (and curve) each JWS algorithm needs; a key of another type never verifies it.
_KEY_TYPE_OF_ALG: dict[str, tuple[str, str | None]] = {
    **{f"RS{bits}": ("RSA", None) for bits in (256, 384, 512)},
    **{f"PS{bits}": ("RSA", None) for bits in (256, 384, 512)},
    "ES256": ("EC", "P-256"),
    "ES384": ("EC", "P-384"),
    "ES512": ("EC", "P-521"),
    "ES256K": ("EC", "secp256k1"),
    "EdDSA": ("OKP", None),
    "Ed25519": ("OKP", "Ed25519"),
    "Ed448": ("OKP", "Ed448"),
}


def key_fits_alg(jwk: dict[str, Any], alg: str) -> bool:
    """True when a JWK may verify a token signed with `alg` (type, curve, `use` and `alg` if stated)."""
    kty, crv = _KEY_TYPE_OF_ALG.get(alg, (None, None))
    if jwk.get("kty") != kty or (crv is not None and jwk.get("crv") != crv):
        return False
    if jwk.get("use", "sig") != "sig":
        return False
    return jwk.get("alg", alg) == alg


class JwksCache:
    """Keys from `{issuer}/.well-known/openid-configuration` -> `jwks_uri`, refetched at most once per interval."""

    def __init__(
        self,
        issuer: str,
        http: httpx.AsyncClient,
        *,
        min_refetch_interval: float = 30.0,
        max_age: float = 3600.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.issuer = issuer
        self.discovery_url = issuer.rstrip("/") + "/.well-known/openid-configuration"
        self._http = http
        self._min_refetch_interval = min_refetch_interval
        self._max_age = max_age
        self._monotonic = monotonic
        self._lock = asyncio.Lock()
        self._jwks_uri: str | None = None
        self._keys: list[dict[str, Any]] = []
        self._fetched_at: float | None = None
        self._loaded = False
        self._last_error = "not fetched yet"
        self.fetch_count = 0  # JWKS fetches attempted, for metrics and tests

    @property
    def jwks_uri(self) -> str | None:
        return self._jwks_uri

    async def key_for(self, kid: str | None, alg: str) -> Key:
        """The key that verifies a token with header `kid`/`alg`; refetches once when the kid is unknown."""
        generation = self.fetch_count
        if not self._loaded:
            # Until the first fetch succeeds, retry at most every few seconds, not on every request.
            await self._refresh(generation, reason="initial", min_interval=min(5.0, self._min_refetch_interval))
            if not self._loaded:
                raise AuthError(503, f"cannot load the issuer's signing keys: {self._last_error}")
            generation = self.fetch_count
        elif self._stale():
            await self._refresh(generation, reason="max age")
            generation = self.fetch_count
        jwk = self._find(kid, alg)
        if jwk is None and kid is not None and not any(k.get("kid") == kid for k in self._keys):
            # A kid we have not seen: the issuer may have rotated. Refetch, but never more often than
            # min_refetch_interval, so that tokens with made-up kids cannot make us hammer the issuer.
            if await self._refresh(
                generation, reason=f"unknown kid {shown(kid)}", min_interval=self._min_refetch_interval
            ):
                jwk = self._find(kid, alg)
        if jwk is None:
            raise AuthError(401, self._why_no_key(kid, alg))
        try:
            return JWKRegistry.import_key(jwk)
        except (JoseError, ValueError, TypeError) as exc:
            raise AuthError(401, f"the issuer's key {shown(kid)} cannot be used: {exc}") from None

    def _find(self, kid: str | None, alg: str) -> dict[str, Any] | None:
        if kid is not None:
            return next((k for k in self._keys if k.get("kid") == kid and key_fits_alg(k, alg)), None)
        fitting = [k for k in self._keys if key_fits_alg(k, alg)]
        return fitting[0] if len(fitting) == 1 else None

    def _why_no_key(self, kid: str | None, alg: str) -> str:
        if kid is None:
            count = sum(key_fits_alg(k, alg) for k in self._keys)
            return f"token has no kid and the issuer publishes {count} {alg} keys, so the signing key is ambiguous"
        if any(k.get("kid") == kid for k in self._keys):
            return f"the issuer's key {shown(kid)} is not a {alg} signing key"
        return f"unknown signing key (kid {shown(kid)}) not in the issuer's JWKS"

    def _stale(self) -> bool:
        return self._fetched_at is not None and self._monotonic() - self._fetched_at >= self._max_age

    async def _refresh(self, generation: int, *, reason: str, min_interval: float = 0.0) -> bool:
        """Fetch the JWKS unless another task already did since `generation` or the last fetch is too recent.

        True when the keys may have changed.
        """
        async with self._lock:
            if self.fetch_count != generation:
                return True  # someone else refetched while we waited; use their result
            if self._fetched_at is not None:
                since = self._monotonic() - self._fetched_at
                if since < min_interval:
                    log.info("not refetching JWKS for %s: last fetch %.1fs ago", reason, since)
                    return False
            await self._fetch(reason)
            return True

    async def _fetch(self, reason: str) -> None:
        self.fetch_count += 1
        self._fetched_at = self._monotonic()
        try:
            if self._jwks_uri is None:
                self._jwks_uri = await self._discover()
            document = await self._get_json(self._jwks_uri, "JWKS")
            keys = document.get("keys")
            if not isinstance(keys, list):
                raise _FetchError(f"{self._jwks_uri} has no 'keys' list")
        except _FetchError as exc:
            self._last_error = str(exc)
            if self._loaded:
                log.warning("JWKS refresh (%s) failed, keeping %d cached keys: %s", reason, len(self._keys), exc)
            else:
                log.error("cannot load the issuer's signing keys: %s", exc)
            return
        # Symmetric keys have no place in a public JWKS; never let one verify anything.
        self._keys = [k for k in keys if isinstance(k, dict) and k.get("kty") in {"RSA", "EC", "OKP"}]
        self._loaded = True
        log.info("fetched JWKS (%s): %d keys, kids %s", reason, len(self._keys), [k.get("kid") for k in self._keys])

    async def _discover(self) -> str:
        document = await self._get_json(self.discovery_url, "discovery document")
        if document.get("issuer") != self.issuer:
            raise _FetchError(
                f"discovery document at {self.discovery_url} names issuer {document.get('issuer')!r}, "
                f"expected exactly {self.issuer!r} (check RECOVERY_OIDC_ISSUER, including a trailing slash)"
            )
        jwks_uri = document.get("jwks_uri")
        if not isinstance(jwks_uri, str) or not jwks_uri:
            raise _FetchError(f"discovery document at {self.discovery_url} has no jwks_uri")
        return jwks_uri

    async def _get_json(self, url: str, what: str) -> dict[str, Any]:
        try:
            response = await self._http.get(url, headers={"Accept": "application/json"})
        except httpx.HTTPError as exc:
            raise _FetchError(f"{what} at {url} unreachable: {exc!r}") from None
        if response.status_code != 200:
            if what == "JWKS":
                self._jwks_uri = None  # rediscover next time: the issuer may have moved it
            raise _FetchError(f"{what} at {url} answered HTTP {response.status_code}")
        try:
            document = response.json()
        except ValueError:
            raise _FetchError(f"{what} at {url} is not JSON") from None
        if not isinstance(document, dict):
            raise _FetchError(f"{what} at {url} is not a JSON object")
        return document


class _FetchError(Exception):
    """The issuer could not give us its discovery document or keys."""
