"""Who is calling and what they may do: the Principal, the role model and the auth error."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_SHOWABLE = re.compile(r"[A-Za-z0-9._:+/=-]{1,64}")

VIEWER = "viewer"
OPERATOR = "operator"
KNOWN_ROLES = frozenset({VIEWER, OPERATOR})
# May push job logs (POST /loki/api/v1/push, /v1/logs) and nothing else: not a KNOWN_ROLE, so a collector's
# token never reads the API or the dashboard, and a viewer's or operator's never pushes.
COLLECTOR = "collector"


class AuthError(Exception):
    """A request cannot be served: `status` is the HTTP status (401, 403 or 503) to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    @property
    def www_authenticate(self) -> str:
        """Value for the WWW-Authenticate response header (RFC 6750 §3).

        Fixed text only: the message may quote parts of a forged token, and header values must be Latin-1
        without CR/LF, so it goes in the response body, never in a header.
        """
        if self.status == 403:
            return 'Bearer error="insufficient_scope", error_description="the token lacks a needed role"'
        return 'Bearer error="invalid_token", error_description="the bearer token is missing or invalid"'

    def __repr__(self) -> str:
        return f"AuthError({self.status}, {self.message!r})"


@dataclass(frozen=True)
class Principal:
    """An authenticated caller; `roles` holds only the roles this service knows, with implied ones added."""

    subject: str
    name: str
    email: str | None
    roles: frozenset[str]

    @property
    def can_read(self) -> bool:
        return bool(self.roles & KNOWN_ROLES)

    @property
    def can_act(self) -> bool:
        """May approve, veto or re-run reconciliation of Advice."""
        return OPERATOR in self.roles

    def require(self, role: str) -> None:
        """Raise AuthError(403) unless the principal holds `role` (operator implies viewer)."""
        if role not in KNOWN_ROLES:
            raise ValueError(f"unknown role {role!r}")
        if role not in self.roles:
            held = ", ".join(sorted(self.roles)) or "none"
            raise AuthError(403, f"the {role} role is required (user {self.name!r} has: {held})")


DEV_PRINCIPAL = Principal(subject="dev", name="dev", email=None, roles=frozenset({VIEWER, OPERATOR}))


def shown(value: object) -> str:
    """A value from a token (kid, alg, typ) as messages may quote it: plain short ASCII as repr, else not at all."""
    if isinstance(value, str) and _SHOWABLE.fullmatch(value):
        return repr(value)
    return "(a value not shown)"


def effective_roles(raw: object) -> frozenset[str]:
    """The known roles in a claim value (a list, or a space/comma-separated string); operator implies viewer."""
    if isinstance(raw, str):
        items: list[Any] = raw.replace(",", " ").split()
    elif isinstance(raw, (list, tuple, set, frozenset)):
        items = list(raw)
    else:
        return frozenset()
    roles = {item.strip().lower() for item in items if isinstance(item, str)} & KNOWN_ROLES
    if OPERATOR in roles:
        roles.add(VIEWER)
    return frozenset(roles)


def claim_at(claims: Mapping[str, Any], path: str) -> object:
    """The claim named `path`, or found by walking its dots (`realm_access.roles`); None when absent.

    An exact key wins, so namespaced claims such as `https://example.org/roles` work too.
    """
    if path in claims:
        return claims[path]
    node: object = claims
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def principal_from_claims(claims: Mapping[str, Any], roles_claim: str) -> Principal:
    """Build the Principal of verified claims; AuthError(403) when it holds neither viewer nor operator."""
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject:
        raise AuthError(401, "token has no subject (sub claim)")
    roles = effective_roles(claim_at(claims, roles_claim))
    name = next(
        (
            value
            for key in ("name", "preferred_username", "email")
            if isinstance(value := claims.get(key), str) and value
        ),
        subject,
    )
    email = claims.get("email") if isinstance(claims.get("email"), str) else None
    if not roles:
        raise AuthError(403, f"no viewer/operator role: user {name!r} has neither role in the {roles_claim!r} claim")
    return Principal(subject=subject, name=name, email=email, roles=roles)


def collector_from_claims(claims: Mapping[str, Any], roles_claim: str) -> str:
    """The pushing collector's name (its subject) when the claims hold the collector role; AuthError(403) else."""
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject:
        raise AuthError(401, "token has no subject (sub claim)")
    raw = claim_at(claims, roles_claim)
    items = raw.replace(",", " ").split() if isinstance(raw, str) else raw if isinstance(raw, (list, tuple)) else []
    if COLLECTOR not in {item.strip().lower() for item in items if isinstance(item, str)}:
        raise AuthError(403, f"the {COLLECTOR} role is required to push logs (subject {shown(subject)})")
    return subject
