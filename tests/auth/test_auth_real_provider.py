"""Tokens from a real OIDC provider (npm oidc-provider) verify; forged ones are refused; key rotation works."""

from __future__ import annotations

import base64
import json
import time

import httpx
import pytest

from app.auth import OPERATOR, VIEWER, AuthError, TokenVerifier, authenticate_request
from tests.plugins.oidc_provider import (
    OidcProvider,
    forge_hmac_with_public_key,
    forge_unsigned,
    new_signing_key,
    start_oidc_provider,
    tamper_payload,
    tamper_signature,
)

pytestmark = pytest.mark.oidc


class Clock:
    """A monotonic clock the test moves forward, to pass the JWKS refetch interval without sleeping."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class CountingHttp:
    """An httpx client whose event hook records every URL the verifier fetches."""

    def __init__(self) -> None:
        self.urls: list[str] = []

        async def record(request: httpx.Request) -> None:
            self.urls.append(str(request.url))

        self.client = httpx.AsyncClient(event_hooks={"request": [record]}, timeout=10)

    def count(self, url: str) -> int:
        return self.urls.count(url)


@pytest.fixture
async def http():
    counting = CountingHttp()
    yield counting
    await counting.client.aclose()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def verifier(oidc_provider: OidcProvider, http: CountingHttp, clock: Clock) -> TokenVerifier:
    return TokenVerifier(oidc_provider.settings(), http=http.client, monotonic=clock)


async def refused(verifier: TokenVerifier, token: str, status: int = 401) -> str:
    with pytest.raises(AuthError) as error:
        await verifier.verify(token)
    assert error.value.status == status, error.value
    return error.value.message


async def test_viewer_client_token_verifies(oidc_provider, verifier):
    principal = await verifier.verify(oidc_provider.token("viewer-client"))
    assert principal.subject == "viewer-client"
    assert principal.roles == {VIEWER}
    assert not principal.can_act


async def test_operator_client_token_verifies(oidc_provider, verifier):
    principal = await verifier.verify(oidc_provider.token("operator-client"))
    assert principal.roles == {VIEWER, OPERATOR}
    assert principal.can_act


async def test_client_without_role_is_forbidden(oidc_provider, verifier):
    assert "no viewer/operator role" in await refused(verifier, oidc_provider.token("norole-client"), status=403)


@pytest.mark.parametrize(("username", "roles"), [("operator-ann", {VIEWER, OPERATOR}), ("bob", {VIEWER})])
async def test_interactive_login_tokens_carry_user_and_roles(oidc_provider, verifier, username, roles):
    # a random port: the dashboard client accepts any loopback port (RFC 8252 native client)
    tokens = oidc_provider.authorization_code_tokens(
        username, redirect_uri="http://127.0.0.1:54321/dashboard/auth/callback"
    )
    principal = await verifier.verify(tokens["access_token"])
    assert (principal.subject, principal.name, principal.email) == (username, username, f"{username}@example.test")
    assert principal.roles == roles
    # the ID token is for the dashboard client, not an access token for our API
    assert "audience" in await refused(verifier, tokens["id_token"])


async def test_authenticate_request_with_real_token(oidc_provider, verifier):
    token = oidc_provider.token("operator-client")
    principal = await authenticate_request({"Authorization": f"Bearer {token}"}, verifier)
    assert principal.can_act
    with pytest.raises(AuthError) as error:
        await authenticate_request({"Authorization": "Bearer "}, verifier)
    assert error.value.status == 401 and error.value.message == "empty bearer token"


async def test_provider_signed_token_with_valid_claims_verifies(oidc_provider, verifier):
    # the baseline of the forgeries below: with nothing broken, our signing helper yields a good token
    assert (await verifier.verify(oidc_provider.sign(oidc_provider.valid_claims()))).can_act


def _forgeries(p: OidcProvider) -> dict[str, tuple[str, str]]:
    """name -> (token, expected message part); each breaks exactly one thing."""
    now = int(time.time())
    real = p.token("viewer-client")
    impostor = new_signing_key()
    return {
        "signature altered": (tamper_signature(real), "signature is invalid"),
        "payload altered (roles raised)": (tamper_payload(real, roles=["operator"]), "signature is invalid"),
        "other RSA key, same kid": (
            p.sign(p.valid_claims(), key=impostor, header={"kid": p.signing_key.kid}),
            "signature is invalid",
        ),
        "alg none": (forge_unsigned(p.valid_claims(), kid=p.signing_key.kid), "alg none"),
        "HS256 with the public key": (
            forge_hmac_with_public_key(p.valid_claims(), p.signing_key),
            "HMAC-signed tokens (HS256)",
        ),
        "expired": (p.sign(p.valid_claims(iat=now - 700, exp=now - 60)), "token expired"),
        "not yet valid": (p.sign(p.valid_claims(nbf=now + 120)), "not valid before"),
        "wrong audience": (p.sign(p.valid_claims(aud="some-other-api")), "audience"),
        "wrong issuer": (p.sign(p.valid_claims(iss="http://127.0.0.1:1")), "issuer"),
        "garbage": ("this-is-not-a-jwt", "malformed token"),
        "three garbage parts": ("a.b.c", "malformed token"),
        "empty": ("", "empty bearer token"),
    }


FORGERY_NAMES = [
    "signature altered",
    "payload altered (roles raised)",
    "other RSA key, same kid",
    "alg none",
    "HS256 with the public key",
    "expired",
    "not yet valid",
    "wrong audience",
    "wrong issuer",
    "garbage",
    "three garbage parts",
    "empty",
]


@pytest.mark.parametrize("name", FORGERY_NAMES)
async def test_forged_tokens_are_refused(oidc_provider, verifier, name):
    token, message = _forgeries(oidc_provider)[name]
    assert message in await refused(verifier, token)


async def test_unknown_kid_triggers_exactly_one_refetch(oidc_provider, verifier, http, clock):
    await verifier.verify(oidc_provider.token())
    assert http.count(oidc_provider.jwks_uri) == 1
    clock.now += 31
    stranger = new_signing_key()
    assert "unknown signing key" in await refused(
        verifier, oidc_provider.sign(oidc_provider.valid_claims(), key=stranger)
    )
    assert http.count(oidc_provider.jwks_uri) == 2
    for _ in range(3):  # more made-up kids within 30 s: no more requests to the issuer
        await refused(verifier, oidc_provider.sign(oidc_provider.valid_claims(), key=new_signing_key()))
    assert http.count(oidc_provider.jwks_uri) == 2
    assert http.count(f"{oidc_provider.issuer}/.well-known/openid-configuration") == 1


async def test_key_rotation_at_the_provider(tmp_path, http, clock):
    provider = start_oidc_provider(tmp_path)
    try:
        verifier = TokenVerifier(provider.settings(), http=http.client, monotonic=clock)
        old_token = provider.token("operator-client")
        assert (await verifier.verify(old_token)).can_act
        new_key = provider.rotate_keys(keep_old=False)
        new_token = provider.token("operator-client")
        assert new_key.kid in _header_kid(new_token)
        clock.now += 31
        assert (await verifier.verify(new_token)).can_act  # picked up without restarting the verifier
        assert http.count(provider.jwks_uri) == 2
        # the old key is gone from the JWKS, so its tokens are refused now (and without another fetch)
        assert "unknown signing key" in await refused(verifier, old_token)
        assert http.count(provider.jwks_uri) == 2
    finally:
        provider.stop()
    assert provider.process.returncode is not None


def _header_kid(token: str) -> str:
    head = token.split(".")[0]
    return json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))["kid"]
