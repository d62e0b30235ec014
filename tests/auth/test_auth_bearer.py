"""Bearer tokens are found in headers, WebSocket init payloads or requests, and malformed ones refused."""

import logging

import pytest
from starlette.datastructures import Headers
from starlette.requests import Request

from app.auth import DEV_PRINCIPAL, AuthError, DevVerifier, Principal, authenticate_request, bearer_token
from app.infra.config import Settings


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
def test_scheme_is_case_insensitive(scheme):
    assert bearer_token(f"{scheme} abc.def-_.ghi") == "abc.def-_.ghi"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "missing Authorization header"),
        ("", "missing Authorization header"),
        ("Bearer", "empty bearer token"),
        ("Bearer    ", "empty bearer token"),
        ("Basic dXNlcjpwYXNz", "unsupported Authorization scheme"),
        ("Bearer a b", "malformed Authorization header"),
        ("Bearer a,b", "malformed Authorization header"),
        ("Token abc", "unsupported Authorization scheme"),
    ],
)
def test_malformed_headers_are_refused(value, message):
    with pytest.raises(AuthError) as refused:
        bearer_token(value)
    assert refused.value.status == 401
    assert message in refused.value.message


class RecordingVerifier:
    """Stands in for TokenVerifier: remembers the token it was asked about."""

    requires_token = True

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def verify(self, token: str) -> Principal:
        self.seen.append(token)
        return Principal(subject="s", name="n", email=None, roles=frozenset({"viewer"}))


def _request(headers: list[tuple[bytes, bytes]]) -> Request:
    return Request({"type": "http", "method": "GET", "path": "/", "headers": headers, "query_string": b""})


@pytest.mark.parametrize(
    "source",
    [
        _request([(b"authorization", b"Bearer tok")]),
        Headers({"Authorization": "Bearer tok"}),
        {"Authorization": "Bearer tok"},  # graphql-ws connection_init payload
        {"authorization": "bearer tok"},
    ],
)
async def test_authenticate_request_reads_every_source(source):
    verifier = RecordingVerifier()
    await authenticate_request(source, verifier)
    assert verifier.seen == ["tok"]


async def test_authenticate_request_without_header_is_401():
    verifier = RecordingVerifier()
    with pytest.raises(AuthError) as refused:
        await authenticate_request(_request([]), verifier)
    assert refused.value.status == 401
    assert verifier.seen == []


async def test_dev_verifier_needs_no_token(caplog):
    with caplog.at_level(logging.WARNING, logger="recovery.auth"):
        verifier = DevVerifier(Settings.build(dev_no_auth=True, bind="127.0.0.1:8000"))
    assert await authenticate_request({}, verifier) == DEV_PRINCIPAL
    assert DEV_PRINCIPAL.subject == "dev" and DEV_PRINCIPAL.can_act
