"""Credentials for slurmrestd's auth/jwt: a token file re-read before it expires, or tokens we sign with Slurm's key."""

from __future__ import annotations

import base64
import getpass
import json
import os
import time
from dataclasses import dataclass

from joserfc import jwt
from joserfc.jwk import OctKey

from app.infra.secret_files import SecretFileError, read_secret_file
from app.slurm.errors import TransientSchedulerError

REFRESH_FRACTION = 0.2  # renew a token when a fifth of its lifetime is left
MIN_REFRESH_MARGIN = 30.0  # ... and never later than 30 s before it expires


@dataclass(frozen=True)
class Token:
    """One JWT and the user name it speaks for, with its expiry (epoch seconds; None when it has none)."""

    value: str
    user: str
    expires_at: float | None
    issued_at: float


def _claims(token: str) -> dict[str, object]:
    """The token's claims without verifying it (slurmctld verifies; we only need `exp` and `sun`)."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError):
        return {}
    return claims if isinstance(claims, dict) else {}


def _due(token: Token, now: float) -> bool:
    if token.expires_at is None:
        return False
    lifetime = max(token.expires_at - token.issued_at, 0.0)
    margin = max(lifetime * REFRESH_FRACTION, MIN_REFRESH_MARGIN)
    return now >= token.expires_at - margin


class TokenFile:
    """A token someone else renews (`scontrol token` in a cron job, a Kubernetes secret): read again when the file
    changes or the token we hold is close to its expiry."""

    def __init__(self, path: str, *, user: str = "") -> None:
        self.path = path
        self.user = user
        self._token: Token | None = None
        self._mtime: int | None = None

    def token(self, now: float | None = None) -> Token:
        now = time.time() if now is None else now
        try:
            mtime = os.stat(self.path).st_mtime_ns
        except OSError as exc:
            raise TransientSchedulerError(f"cannot read slurmrestd token file {self.path}: {exc}") from None
        if self._token is None or mtime != self._mtime or _due(self._token, now):
            self._token = self._read(now)
            self._mtime = mtime
        return self._token

    def _read(self, now: float) -> Token:
        try:
            text = read_secret_file(self.path, "slurmrestd token file").strip()
        except SecretFileError as exc:
            raise TransientSchedulerError(str(exc)) from None
        # `scontrol token` prints SLURM_JWT=<token>; a secret usually holds the bare token
        value = text.split("=", 1)[1].strip() if text.startswith("SLURM_JWT=") else text
        if not value or value.count(".") != 2:
            raise TransientSchedulerError(f"slurmrestd token file {self.path} holds no JWT")
        claims = _claims(value)
        exp = claims.get("exp")
        iat = claims.get("iat")
        user = self.user or str(claims.get("sun") or "") or getpass.getuser()
        return Token(
            value=value,
            user=user,
            expires_at=float(exp) if isinstance(exp, int | float) else None,
            issued_at=float(iat) if isinstance(iat, int | float) else now,
        )


class SignedTokens:
    """Tokens signed with the cluster's jwt_key (HS256, claims exp/iat/sun), as `scontrol token` makes them."""

    def __init__(self, key_path: str, *, user: str = "", lifetime: float = 1800.0) -> None:
        self.key_path = key_path
        self.user = user or getpass.getuser()
        self.lifetime = max(float(lifetime), 60.0)
        self._token: Token | None = None

    def token(self, now: float | None = None) -> Token:
        now = time.time() if now is None else now
        if self._token is None or _due(self._token, now):
            self._token = self._sign(now)
        return self._token

    def _sign(self, now: float) -> Token:
        try:
            with open(self.key_path, "rb") as handle:
                secret = handle.read()
        except OSError as exc:
            raise TransientSchedulerError(f"cannot read Slurm's jwt key {self.key_path}: {exc}") from None
        if not secret:
            raise TransientSchedulerError(f"Slurm's jwt key {self.key_path} is empty")
        issued = int(now)
        expires = issued + int(self.lifetime)
        value = jwt.encode(
            {"alg": "HS256", "typ": "JWT"},
            {"exp": expires, "iat": issued, "sun": self.user},
            OctKey.import_key(secret),
        )
        return Token(value=value, user=self.user, expires_at=float(expires), issued_at=float(issued))


TokenSource = TokenFile | SignedTokens
