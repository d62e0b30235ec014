"""TokenVerifier against a stub issuer (no network): claims, time leeway, algorithms and the JWKS cache."""

import asyncio
import time
import warnings

import httpx
import pytest
from joserfc import jwt
from joserfc.errors import SecurityWarning
from joserfc.jwk import ECKey, OKPKey, RSAKey

from app.auth import AuthError, TokenVerifier, allowed_algorithms
from app.infra.config import Settings, SettingsError

ISSUER = "https://idp.example.test/realms/hpc"


class StubIssuer:
    """Serves discovery and JWKS through httpx.MockTransport and counts the JWKS requests."""

    def __init__(self, *keys):
        self.keys = list(keys)
        self.jwks_requests = 0
        self.discovery_requests = 0
        self.down = False
        self.discovery_issuer = ISSUER

    def handle(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        if request.url.path.endswith("/.well-known/openid-configuration"):
            self.discovery_requests += 1
            return httpx.Response(200, json={"issuer": self.discovery_issuer, "jwks_uri": f"{ISSUER}/certs"})
        if request.url.path.endswith("/certs"):
            self.jwks_requests += 1
            return httpx.Response(200, json={"keys": [k.as_dict(private=False) for k in self.keys]})
        return httpx.Response(404)


class Clock:
    def __init__(self):
        self.now = 1_000_000.0

    def __call__(self):
        return self.now


def rsa(kid="k1", alg="RS256"):
    return RSAKey.generate_key(2048, parameters={"kid": kid, "alg": alg, "use": "sig"})


def claims(**overrides):
    """Good claims for the stub issuer; an override of None removes that claim."""
    now = int(time.time())
    good = {"iss": ISSUER, "aud": "recovery", "sub": "u1", "iat": now, "exp": now + 300, "roles": ["viewer"]}
    return {k: v for k, v in (good | overrides).items() if v is not None}


def encode(header, payload, key):
    """A JWS of exactly this header (no typ added) and payload."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SecurityWarning)  # joserfc deprecates the name EdDSA (RFC 9864)
        return jwt.encode(header, payload, key, algorithms=[header["alg"]], default_type=None)


def sign(key, alg="RS256", header=None, **overrides):
    protected = {"alg": alg, "typ": "at+jwt"} | ({"kid": key.kid} if key.kid else {}) | (header or {})
    return encode({k: v for k, v in protected.items() if v is not None}, claims(**overrides), key)


@pytest.fixture
def key():
    return rsa()


@pytest.fixture
def issuer(key):
    return StubIssuer(key)


@pytest.fixture
def monotonic():
    return Clock()


@pytest.fixture
async def verifier(issuer, monotonic):
    async with httpx.AsyncClient(transport=httpx.MockTransport(issuer.handle)) as http:
        yield TokenVerifier(Settings.build(oidc_issuer=ISSUER), http=http, monotonic=monotonic)


async def refused(verifier, token, status=401):
    with pytest.raises(AuthError) as error:
        await verifier.verify(token)
    assert error.value.status == status, error.value
    return error.value.message


async def test_valid_token_and_aud_list(verifier, key):
    principal = await verifier.verify(sign(key, aud=["other", "recovery"], roles="operator"))
    assert principal.subject == "u1" and principal.can_act


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"exp": -31}, "token expired"),
        ({"exp": None}, "no exp claim"),
        ({"exp": "soon"}, "exp claim is not a number"),
        ({"nbf": 60}, "not valid before"),
        ({"iat": 60}, "issued in the future"),
        ({"aud": "other"}, "audience"),
        ({"aud": ["a", "b"]}, "audience"),
        ({"aud": None}, "audience"),
        ({"iss": ISSUER + "/"}, "issuer"),
        ({"sub": None}, "no subject"),
    ],
)
async def test_bad_claims_are_refused(verifier, key, overrides, message):
    # Time claims are given as offsets from now: parameters are built at collection time,
    # which can be minutes before this test runs in a full suite.
    now = int(time.time())
    claims = {
        name: (now + value if name in {"exp", "nbf", "iat"} and isinstance(value, int) else value)
        for name, value in overrides.items()
    }
    assert message in await refused(verifier, sign(key, **claims))


async def test_leeway_is_thirty_seconds(verifier, key):
    now = int(time.time())
    await verifier.verify(sign(key, exp=now - 20, nbf=now + 20, iat=now + 20))


async def test_no_role_is_forbidden(verifier, key):
    assert "no viewer/operator role" in await refused(verifier, sign(key, roles=["admin"]), status=403)


@pytest.mark.parametrize("typ", ["JWT", "at+jwt", "application/at+jwt", None])
async def test_accepted_types(verifier, key, typ):
    await verifier.verify(sign(key, header={"typ": typ}))


async def test_other_types_are_refused(verifier, key):
    assert "not an access token" in await refused(verifier, sign(key, header={"typ": "dpop+jwt"}))


async def test_disallowed_algorithm_refused_before_any_key_lookup(issuer, monotonic):
    ec = ECKey.generate_key("P-256", parameters={"kid": "ec"})
    issuer.keys.append(ec)
    async with httpx.AsyncClient(transport=httpx.MockTransport(issuer.handle)) as http:
        strict = TokenVerifier(
            Settings.build(oidc_issuer=ISSUER, oidc_algorithms=("RS256",)), http=http, monotonic=monotonic
        )
        assert "ES256 is not allowed" in await refused(strict, sign(ec, alg="ES256"))
    assert issuer.discovery_requests == 0 and issuer.jwks_requests == 0


@pytest.mark.parametrize(
    ("make", "alg"),
    [
        (lambda: ECKey.generate_key("P-256", parameters={"kid": "ec"}), "ES256"),
        (lambda: OKPKey.generate_key("Ed25519", parameters={"kid": "ed"}), "EdDSA"),
        (lambda: rsa("ps", "PS256"), "PS256"),
    ],
)
async def test_default_algorithms_verify(issuer, verifier, make, alg):
    other = make()
    issuer.keys.append(other)
    assert (await verifier.verify(sign(other, alg=alg))).subject == "u1"


async def test_key_of_wrong_type_for_alg_is_refused(issuer, verifier):
    ec = ECKey.generate_key("P-256", parameters={"kid": "k1"})
    # same kid as the published RSA key, but an ES256 token: the RSA key must not be used for it
    assert "not a ES256 signing key" in await refused(verifier, sign(ec, alg="ES256"))


@pytest.mark.parametrize("configured", [("HS256",), ("RS256", "none"), ("RS256", "HS512"), ("XX1",), ()])
def test_settings_cannot_allow_none_hmac_or_unknown(configured):
    with pytest.raises(SettingsError):
        allowed_algorithms(configured)


def test_issuer_is_required():
    with pytest.raises(SettingsError, match="RECOVERY_OIDC_ISSUER"):
        TokenVerifier(Settings.build())


async def test_unknown_kid_refetches_once_then_rate_limits(verifier, issuer, key, monotonic):
    await verifier.verify(sign(key))
    assert issuer.jwks_requests == 1
    forged = rsa("forged")
    assert "unknown signing key" in await refused(verifier, sign(forged))
    assert issuer.jwks_requests == 1  # the cache is younger than 30 s: no refetch at all
    monotonic.now += 31
    assert "unknown signing key" in await refused(verifier, sign(forged))
    assert issuer.jwks_requests == 2  # exactly one refetch
    for _ in range(5):
        await refused(verifier, sign(rsa(f"forged-{_}")))
    assert issuer.jwks_requests == 2
    assert issuer.discovery_requests == 1


async def test_rotation_is_picked_up_after_the_interval(verifier, issuer, key, monotonic):
    await verifier.verify(sign(key))
    rotated = rsa("k2")
    issuer.keys = [rotated, key]
    monotonic.now += 31
    assert (await verifier.verify(sign(rotated))).subject == "u1"
    assert issuer.jwks_requests == 2
    await verifier.verify(sign(key))  # the old key is still published and cached
    assert issuer.jwks_requests == 2


async def test_concurrent_unknown_kids_share_one_fetch(verifier, issuer, key, monotonic):
    await verifier.verify(sign(key))
    monotonic.now += 31
    tokens = [sign(rsa(f"x{i}")) for i in range(3)] * 4
    results = await asyncio.gather(*(verifier.verify(t) for t in tokens), return_exceptions=True)
    assert all(isinstance(r, AuthError) and r.status == 401 for r in results)
    assert issuer.jwks_requests == 2


async def test_issuer_down_is_503_and_not_hammered(verifier, issuer, key, monotonic):
    issuer.down = True
    for _ in range(3):
        assert "cannot load the issuer's signing keys" in await refused(verifier, sign(key), status=503)
    assert issuer.discovery_requests == 0  # the stub refuses before counting
    issuer.down = False
    await refused(verifier, sign(key), status=503)  # retried at most every 5 s
    monotonic.now += 6
    assert (await verifier.verify(sign(key))).subject == "u1"


async def test_refresh_failure_keeps_cached_keys(verifier, issuer, key, monotonic):
    await verifier.verify(sign(key))
    issuer.down = True
    monotonic.now += 4000  # past max age: a refresh is attempted and fails
    assert (await verifier.verify(sign(key))).subject == "u1"
    assert verifier.keys.fetch_count == 2


async def test_discovery_naming_another_issuer_is_refused(verifier, issuer, key):
    issuer.discovery_issuer = "https://evil.example.test"
    assert "expected exactly" in await refused(verifier, sign(key), status=503)


async def test_token_without_kid_uses_the_only_fitting_key(verifier, issuer, key):
    keyless = RSAKey.import_key({k: v for k, v in key.as_dict(private=True).items() if k != "kid"})
    token = encode({"alg": "RS256"}, claims(), keyless)
    await verifier.verify(token)

    second = StubIssuer(key, rsa("k2"))
    async with httpx.AsyncClient(transport=httpx.MockTransport(second.handle)) as http:
        two_keys = TokenVerifier(Settings.build(oidc_issuer=ISSUER), http=http)
        assert "ambiguous" in await refused(two_keys, token)
