"""Operations that ask for too much are refused with an error naming the limit; introspection stays allowed."""

from __future__ import annotations

import httpx

from app.api.limits import MAX_ALIASES, MAX_COST, MAX_DEPTH
from tests.api.helpers import run_graphql


async def test_depth_limit(client: httpx.AsyncClient) -> None:
    # attempt -> job -> workflow -> jobs -> edges -> node -> attempts -> edges -> node -> workflow -> jobs ...
    deep = (
        '{ attempt(ref: "1-0") { job { workflow { jobs(first: 1) { edges { node { attempts(first: '
        "1) { edges { node { workflow { jobs(first: 1) { edges { node { name } } } } } } } } } } } } } }"
    )
    body = await run_graphql(client, deep, expect_errors=True)
    assert body["data"] is None and f"exceeds maximum operation depth of {MAX_DEPTH}" in body["errors"][0]["message"]


async def test_cost_limit_counts_nested_page_sizes_including_variables(client: httpx.AsyncClient) -> None:
    query = (
        "query($n: Int) { workflows(first: 20) { edges { node { jobs(first: 20) { edges { node { "
        "attempts(first: $n) { edges { node { state } } } } } } } } } }"
    )
    body = await run_graphql(client, query, {"n": 100}, expect_errors=True)
    error = body["errors"][0]
    assert error["extensions"]["code"] == "LIMIT_EXCEEDED" and error["extensions"]["limit"] == "cost"
    assert f"the limit is {MAX_COST}" in error["message"]
    # The same shape with small pages is fine.
    assert (await run_graphql(client, query, {"n": 1}, expect_errors=True)).get("errors") is None


async def test_alias_limit(client: httpx.AsyncClient) -> None:
    aliases = " ".join(f"a{n}: viewer {{ name }}" for n in range(MAX_ALIASES + 1))
    body = await run_graphql(client, f"{{ {aliases} }}", expect_errors=True)
    assert "aliases found" in body["errors"][0]["message"] or "alias" in body["errors"][0]["message"].lower()


async def test_token_limit(client: httpx.AsyncClient) -> None:
    fields = " ".join(["name"] * 6000)
    body = await run_graphql(client, f"{{ viewer {{ {fields} }} }}", expect_errors=True)
    assert "token" in body["errors"][0]["message"].lower()


async def test_introspection_is_allowed_for_authenticated_users(client: httpx.AsyncClient) -> None:
    body = await run_graphql(client, "{ __schema { queryType { name } types { name } } }")
    assert body["data"]["__schema"]["queryType"]["name"] == "Query"


async def test_a_document_validated_once_is_reused_yet_its_cost_and_errors_are_checked_each_time(
    client: httpx.AsyncClient,
) -> None:
    from app.api import masking

    query = (
        "query($n: Int) { workflows(first: 20) { edges { node { jobs(first: 20) { edges { node { "
        "attempts(first: $n) { edges { node { state } } } } } } } } } } # cached"
    )
    assert (await run_graphql(client, query, {"n": 1}, expect_errors=True)).get("errors") is None
    assert query in masking._documents  # parsed and validated once, kept by its text
    # Served from the cache, the variable-dependent cost limit still refuses big pages.
    error = (await run_graphql(client, query, {"n": 100}, expect_errors=True))["errors"][0]
    assert error["extensions"]["limit"] == "cost"
    # An invalid document is never kept: it gets the spec's error every time.
    for _ in range(2):
        body = await run_graphql(client, "{ viewer { noSuchField } }", expect_errors=True)
        assert "Cannot query field 'noSuchField'" in body["errors"][0]["message"]
    assert "{ viewer { noSuchField } }" not in masking._documents
