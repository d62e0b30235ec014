"""Roles come from a configurable claim; operator implies viewer; a token without a known role is refused."""

import pytest

from app.auth import OPERATOR, VIEWER, AuthError, effective_roles
from app.auth.principal import claim_at, principal_from_claims


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (["viewer"], {VIEWER}),
        (["operator"], {VIEWER, OPERATOR}),
        ("operator other", {VIEWER, OPERATOR}),
        ("viewer,admin", {VIEWER}),
        (["Operator"], {VIEWER, OPERATOR}),
        (["admin", "user"], set()),
        ("", set()),
        (None, set()),
        ({"viewer": True}, set()),
        ([1, None, "viewer"], {VIEWER}),
    ],
)
def test_effective_roles(raw, expected):
    assert effective_roles(raw) == frozenset(expected)


def test_dotted_path_and_namespaced_claim():
    keycloak = {"realm_access": {"roles": ["offline_access", "operator"]}}
    assert claim_at(keycloak, "realm_access.roles") == ["offline_access", "operator"]
    assert claim_at(keycloak, "realm_access.missing") is None
    assert claim_at({"realm_access": ["x"]}, "realm_access.roles") is None
    auth0 = {"https://recovery.example/roles": ["viewer"]}
    assert claim_at(auth0, "https://recovery.example/roles") == ["viewer"]


def test_principal_from_claims_uses_configured_claim_and_names():
    claims = {
        "sub": "u1",
        "preferred_username": "ann",
        "email": "ann@x.test",
        "groups": "viewer",
        "roles": ["operator"],
    }
    principal = principal_from_claims(claims, "groups")
    assert principal.subject == "u1"
    assert principal.name == "ann"
    assert principal.email == "ann@x.test"
    assert principal.roles == {VIEWER}
    assert principal.can_read and not principal.can_act
    with pytest.raises(AuthError) as refused:
        principal.require(OPERATOR)
    assert refused.value.status == 403
    assert principal_from_claims(claims, "roles").can_act


def test_no_known_role_is_forbidden():
    with pytest.raises(AuthError) as refused:
        principal_from_claims({"sub": "u1", "roles": ["admin"]}, "roles")
    assert refused.value.status == 403
    assert "no viewer/operator role" in refused.value.message
    assert 'error="insufficient_scope"' in refused.value.www_authenticate


def test_missing_subject_is_unauthenticated():
    with pytest.raises(AuthError) as refused:
        principal_from_claims({"roles": ["viewer"]}, "roles")
    assert refused.value.status == 401


def test_only_the_collector_role_may_push_and_it_reads_nothing():
    from app.auth.principal import collector_from_claims

    claims = {"sub": "alloy-node7", "roles": ["collector"]}
    assert collector_from_claims(claims, "roles") == "alloy-node7"
    for roles in (["viewer"], ["operator"], [], "viewer operator"):
        with pytest.raises(AuthError) as refused:
            collector_from_claims({"sub": "someone", "roles": roles}, "roles")
        assert refused.value.status == 403
    with pytest.raises(AuthError) as refused:  # a collector's token is no viewer: it cannot read the API
        principal_from_claims(claims, "roles")
    assert refused.value.status == 403
