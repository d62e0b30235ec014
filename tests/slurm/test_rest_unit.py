"""Pure parts of the slurmrestd adapter: API version choice from OpenAPI, JWT refresh, URL forms."""

from __future__ import annotations

import os

import pytest
from joserfc import jwt
from joserfc.jwk import OctKey

from app.infra.config import Settings
from app.slurm.errors import OperationDisabled, TransientSchedulerError
from app.slurm.fake import FakeScheduler
from app.slurm.rest_auth import SignedTokens, TokenFile
from app.slurm.rest_scheduler import (
    RestScheduler,
    RestUnsupported,
    RestVersionUnsupported,
    choose_versions,
    parse_rest_url,
)

KEY = b"k" * 48


def _spec(*versions: str, excluded: dict | None = None) -> dict:
    paths: dict = {}
    schemas: dict = {}
    for version in versions:
        paths[f"/slurm/{version}/jobs/"] = {"get": {}}
        ref = f"#/components/schemas/{version}_job_desc_msg"
        paths[f"/slurm/{version}/job/{{job_id}}"] = {
            "post": {"requestBody": {"content": {"application/json": {"schema": {"$ref": ref}}}}}
        }
        schemas[f"{version}_job_desc_msg"] = {"properties": {"hold": {"type": "boolean"}, **(excluded or {})}}
    return {"paths": paths, "components": {"schemas": schemas}}


def test_newest_known_version_is_chosen_and_its_update_fields_read() -> None:
    spec = _spec("v0.0.40", "v0.0.41", "v0.0.42", excluded={"excluded_nodes": {"type": "array"}})
    spec["paths"]["/slurmdb/v0.0.42/job/{job_id}"] = {"get": {}}
    assert choose_versions(spec) == ("v0.0.42", "v0.0.42", "list")
    assert choose_versions(spec, "v0.0.40") == ("v0.0.40", "v0.0.42", "list")
    with pytest.raises(OperationDisabled, match="not v0.0.39"):
        choose_versions(spec, "v0.0.39")


def test_2205_spec_has_no_excluded_nodes_and_no_slurmdb() -> None:
    # the shape slurmrestd 22.05 serves at /openapi/v3 (paths without a trailing slash, job_properties)
    spec = {
        "paths": {
            f"/slurm/v0.0.{m}/{p}": {
                "post": {
                    "requestBody": {
                        "content": {
                            "application/json": {"schema": {"$ref": f"#/components/schemas/v0.0.{m}_job_properties"}}
                        }
                    }
                }
            }
            if p == "job/{job_id}"
            else {"get": {}}
            for m in (36, 37, 38)
            for p in ("jobs", "job/{job_id}")
        },
        "components": {
            "schemas": {f"v0.0.{m}_job_properties": {"properties": {"hold": {}, "requeue": {}}} for m in (36, 37, 38)}
        },
    }
    assert choose_versions(spec) == ("v0.0.38", None, None)


def test_newest_known_version_wins_and_only_unknown_ones_or_no_jobs_api_is_an_error() -> None:
    assert choose_versions(_spec("v0.0.44", "v0.0.45", "v0.0.50"))[0] == "v0.0.45"
    with pytest.raises(RestVersionUnsupported, match=r"offers v0.0.50, v0.0.51; Recovery reads v0.0.36 to v0.0.45"):
        choose_versions(_spec("v0.0.51", "v0.0.50"))
    with pytest.raises(TransientSchedulerError, match="no /slurm"):
        choose_versions({"paths": {"/openapi/v3": {}}})


def test_url_forms() -> None:
    assert parse_rest_url("http://ctl:6820/") == ("http://ctl:6820", None)
    assert parse_rest_url("unix:/run/slurmrestd.sock") == ("http://slurmrestd", "/run/slurmrestd.sock")
    for bad in ("ctl:6820", "unix:relative.sock"):
        with pytest.raises(ValueError):
            parse_rest_url(bad)


def test_signed_tokens_carry_exp_iat_sun_and_are_renewed_before_expiry(tmp_path) -> None:
    key = tmp_path / "jwt_hs256.key"
    key.write_bytes(KEY)
    tokens = SignedTokens(str(key), user="alice", lifetime=600)
    first = tokens.token(now=1_000_000)
    claims = jwt.decode(first.value, OctKey.import_key(KEY)).claims
    assert claims == {"exp": 1_000_600, "iat": 1_000_000, "sun": "alice"} and first.user == "alice"
    assert tokens.token(now=1_000_400) is first  # 200 s left of 600: not yet (renewed at a fifth, 120 s)
    renewed = tokens.token(now=1_000_481)
    assert renewed is not first and jwt.decode(renewed.value, OctKey.import_key(KEY)).claims["iat"] == 1_000_481


def test_token_file_is_read_again_when_it_changes_or_nears_expiry(tmp_path) -> None:
    def token(iat: int, exp: int, user: str = "bob") -> str:
        return jwt.encode({"alg": "HS256"}, {"iat": iat, "exp": exp, "sun": user}, OctKey.import_key(KEY))

    path = tmp_path / "token"
    path.write_text(f"SLURM_JWT={token(0, 1000)}\n")
    source = TokenFile(str(path))
    first = source.token(now=10)
    assert (first.user, first.expires_at) == ("bob", 1000.0)
    assert source.token(now=500) is first
    path.write_text(token(900, 5000, "carol"))
    os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns + 1_000_000))
    assert source.token(now=950).user == "carol"
    path.write_text("not a token")
    os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns + 2_000_000))
    with pytest.raises(TransientSchedulerError, match="holds no JWT"):
        source.token(now=960)


async def test_rest_scheduler_drains_through_its_cli_fallback_and_refuses_without_it() -> None:
    fake = FakeScheduler()
    settings = Settings.build(slurmrestd_url="http://127.0.0.1:1")
    rest = RestScheduler(settings, fallback=fake)  # type: ignore[arg-type]  # duck-typed like the CLI scheduler
    await rest.drain_node("node2", "recovery: test")
    assert await rest.node_drained("node2") and fake.drained == {"node2"}
    without = RestScheduler(Settings.build(slurmrestd_url="http://127.0.0.1:1", slurmrestd_cli_fallback=False))
    with pytest.raises(RestUnsupported, match="RECOVERY_SLURMRESTD_CLI_FALLBACK is off"):
        await without.drain_node("node2", "recovery: test")
