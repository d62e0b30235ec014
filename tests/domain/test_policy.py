"""The APS policy parser: every comment shape from the user guide, type rules, and never-raise properties."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain.admission.policy import (
    INVALID,
    NO_POLICY,
    VALID,
    AnomalyDetectionConfig,
    EffectivePolicy,
    PolicyResult,
    parse_comment,
)

# Exactly the user guide's directive value (what sbatch passes on after removing the single quotes).
GUIDE_COMMENT = (
    '{"APS":{"workflow_id":"training-example","environment":"customer-slurm","mode":"observe",'
    '"auto_resume_mode":"requeue","max_requeue_times":1}}'
)
GUIDE_ANOMALY_OBJECT = {
    "anomaly_detection_config": {
        "log_based_timeout_enabled": True,
        "log_based_timeout_threshold_pretraining": 960,
        "log_based_timeout_threshold_trainingloop": 840,
    }
}


def aps(**policy: object) -> str:
    return json.dumps({"APS": {"environment": "customer-slurm", **policy}})


def error_paths(result: PolicyResult) -> list[str]:
    return [issue.path for issue in result.errors]


def test_user_guide_comment_is_valid_with_defaults_filled_in():
    result = parse_comment(GUIDE_COMMENT)
    assert result.status == VALID
    assert result.wrapper == "APS"
    assert result.errors == () and result.warnings == ()
    assert result.policy.to_dict() == {
        "workflow_id": "training-example",
        "environment": "customer-slurm",
        "mode": "observe",
        "auto_resume_mode": "requeue",
        "max_requeue_times": 1,
        "log_file_paths_shared_across_attempts": False,
        "anomaly_detection_config": {
            "log_based_timeout_enabled": True,
            "log_based_timeout_threshold_pretraining": 960,
            "log_based_timeout_threshold_trainingloop": 840,
            "straggler_detection_enabled": False,
        },
    }
    assert set(result.given) == {"workflow_id", "environment", "mode", "auto_resume_mode", "max_requeue_times"}


def test_guide_anomaly_object_merged_into_the_policy_is_valid():
    policy = json.loads(GUIDE_COMMENT)
    policy["APS"].update(GUIDE_ANOMALY_OBJECT)
    result = parse_comment(json.dumps(policy))
    assert result.status == VALID
    assert result.policy.to_dict()["anomaly_detection_config"]["log_based_timeout_threshold_pretraining"] == 960
    assert "anomaly_detection_config.log_based_timeout_enabled" in result.given
    assert "anomaly_detection_config.straggler_detection_enabled" not in result.given


def test_tuned_thresholds_override_only_what_is_given():
    result = parse_comment(aps(anomaly_detection_config={"log_based_timeout_threshold_trainingloop": 1200}))
    config = result.policy.to_dict()["anomaly_detection_config"]
    assert config["log_based_timeout_threshold_trainingloop"] == 1200
    assert config["log_based_timeout_threshold_pretraining"] == 960
    assert config["log_based_timeout_enabled"] is True


def test_minimal_policy_gets_every_default():
    result = parse_comment(aps())
    assert result.status == VALID
    policy = result.policy.to_dict()
    assert policy["workflow_id"] is None  # the caller derives it from the job id
    assert policy["mode"] == "observe"
    assert policy["auto_resume_mode"] == "requeue"
    assert policy["max_requeue_times"] is None  # the site ceiling applies
    assert policy["log_file_paths_shared_across_attempts"] is False
    assert policy["anomaly_detection_config"] == AnomalyDetectionConfig().to_dict()
    assert result.policy == EffectivePolicy(environment="customer-slurm")  # typed: the defaults are the dataclass's


def test_heimdall_wrapper_is_accepted():
    result = parse_comment(json.dumps({"HEIMDALL": {"environment": "customer-slurm", "mode": "act"}}))
    assert result.status == VALID
    assert result.wrapper == "HEIMDALL"
    assert result.policy.to_dict()["mode"] == "act"


def test_both_wrappers_is_an_error():
    result = parse_comment(json.dumps({"APS": {"environment": "e"}, "HEIMDALL": {"environment": "e"}}))
    assert result.status == INVALID
    assert "$" in error_paths(result)


@pytest.mark.parametrize("key", ["aps", "Aps", "heimdall", " APS"])
def test_wrong_case_wrapper_is_an_attempt_with_a_reason(key):
    result = parse_comment(json.dumps({key: {"environment": "customer-slurm"}}))
    assert result.status == INVALID
    assert result.policy is None
    assert "upper case" in result.reason


def test_unwrapped_policy_does_not_enrol_but_says_how_to_fix():
    result = parse_comment(json.dumps({"workflow_id": "w", "environment": "customer-slurm", "mode": "observe"}))
    assert result.status == NO_POLICY
    assert '{"APS"' in result.reason


@pytest.mark.parametrize(
    "comment",
    [
        None,
        "",
        "   ",
        "nightly run for paper",
        "perhaps maps",
        "aps test run",
        "{}",
        "[]",
        "42",
        '"text"',
        '{"owner": "team-a"}',
    ],
)
def test_ordinary_comments_are_not_policies(comment):
    result = parse_comment(comment)
    assert result.status == NO_POLICY
    assert not result.is_attempt
    assert result.errors == ()


@pytest.mark.parametrize(
    "comment",
    [
        '{"APS": {"environment": "customer-slurm"',  # truncated
        "{'APS': {'environment': 'customer-slurm'}}",  # single quotes, a common shell slip
        "APS please",
        '{"aps": {environment: x}}',
        '{"HEIMDALL": NaN}',
        '{"APS": {"environment": "e", "max_requeue_times": Infinity}}',
    ],
)
def test_malformed_attempts_are_invalid_with_a_reason(comment):
    result = parse_comment(comment)
    assert result.status == INVALID
    assert result.is_attempt
    assert result.reason
    assert result.errors


def test_non_object_top_level_with_aps_is_invalid():
    result = parse_comment('["APS", {"environment": "e"}]')
    assert result.status == INVALID
    assert error_paths(result) == ["$"]


def test_wrapper_value_must_be_an_object():
    result = parse_comment('{"APS": "observe"}')
    assert result.status == INVALID
    assert error_paths(result) == ["$.APS"]


def test_environment_is_required():
    result = parse_comment('{"APS": {"workflow_id": "w"}}')
    assert result.status == INVALID
    assert error_paths(result) == ["$.APS.environment"]
    assert "required" in result.errors[0].message


@pytest.mark.parametrize(
    ("policy", "path"),
    [
        ({"mode": "ACT"}, "$.APS.mode"),
        ({"mode": "auto"}, "$.APS.mode"),
        ({"auto_resume_mode": "restart"}, "$.APS.auto_resume_mode"),
        ({"max_requeue_times": -1}, "$.APS.max_requeue_times"),
        ({"max_requeue_times": "1"}, "$.APS.max_requeue_times"),
        ({"max_requeue_times": 1.5}, "$.APS.max_requeue_times"),
        ({"max_requeue_times": 1.0}, "$.APS.max_requeue_times"),
        ({"max_requeue_times": True}, "$.APS.max_requeue_times"),
        ({"max_requeue_times": 10**12}, "$.APS.max_requeue_times"),
        ({"workflow_id": 7}, "$.APS.workflow_id"),
        ({"workflow_id": ""}, "$.APS.workflow_id"),
        ({"workflow_id": None}, "$.APS.workflow_id"),
        ({"environment": ["customer-slurm"]}, "$.APS.environment"),
        ({"log_file_paths_shared_across_attempts": "true"}, "$.APS.log_file_paths_shared_across_attempts"),
        ({"log_file_paths_shared_across_attempts": 1}, "$.APS.log_file_paths_shared_across_attempts"),
        ({"anomaly_detection_config": []}, "$.APS.anomaly_detection_config"),
        (
            {"anomaly_detection_config": {"log_based_timeout_enabled": "false"}},
            "$.APS.anomaly_detection_config.log_based_timeout_enabled",
        ),
        (
            {"anomaly_detection_config": {"straggler_detection_enabled": 0}},
            "$.APS.anomaly_detection_config.straggler_detection_enabled",
        ),
        (
            {"anomaly_detection_config": {"log_based_timeout_threshold_pretraining": 0}},
            "$.APS.anomaly_detection_config.log_based_timeout_threshold_pretraining",
        ),
        (
            {"anomaly_detection_config": {"log_based_timeout_threshold_trainingloop": -5}},
            "$.APS.anomaly_detection_config.log_based_timeout_threshold_trainingloop",
        ),
        (
            {"anomaly_detection_config": {"log_based_timeout_threshold_trainingloop": 840.0}},
            "$.APS.anomaly_detection_config.log_based_timeout_threshold_trainingloop",
        ),
        (
            {"anomaly_detection_config": {"log_based_timeout_threshold_pretraining": "960"}},
            "$.APS.anomaly_detection_config.log_based_timeout_threshold_pretraining",
        ),
    ],
)
def test_wrong_values_are_errors_at_their_json_path(policy, path):
    result = parse_comment(aps(**policy))
    assert result.status == INVALID
    assert error_paths(result) == [path]
    assert result.policy is None
    assert path in result.reason


def test_booleans_as_strings_get_a_specific_message():
    result = parse_comment(aps(log_file_paths_shared_across_attempts="true"))
    assert "without quotes" in result.errors[0].message


def test_every_error_is_reported_not_just_the_first():
    result = parse_comment(
        aps(mode="ACT", max_requeue_times=-1, anomaly_detection_config={"log_based_timeout_threshold_pretraining": 0})
    )
    assert len(result.errors) == 3
    assert "2 more problems" in result.reason


def test_zero_retries_is_allowed():
    assert parse_comment(aps(max_requeue_times=0)).policy.to_dict()["max_requeue_times"] == 0


def test_singleton_dependency_is_a_recognised_resume_mode():
    assert (
        parse_comment(aps(auto_resume_mode="singleton_dependency")).policy.to_dict()["auto_resume_mode"]
        == "singleton_dependency"
    )


def test_unknown_keys_are_kept_and_warned_not_errors():
    result = parse_comment(
        aps(team="vision", anomaly_detection_config={"log_based_timeout_threshold_pretraining": 600, "xid_watch": True})
    )
    assert result.status == VALID
    assert result.policy.to_dict()["team"] == "vision"
    assert result.policy.to_dict()["anomaly_detection_config"]["xid_watch"] is True
    assert [w.path for w in result.warnings] == ["$.APS.team", "$.APS.anomaly_detection_config.xid_watch"]


def test_top_level_keys_beside_the_wrapper_are_warned():
    result = parse_comment(json.dumps({"APS": {"environment": "e"}, "note": "x"}))
    assert result.status == VALID
    assert [w.path for w in result.warnings] == ["$.note"]


def test_duplicate_keys_are_errors():
    result = parse_comment('{"APS": {"environment": "e", "mode": "observe", "mode": "act"}}')
    assert result.status == INVALID
    assert error_paths(result) == ["$.APS.mode"]


def test_odd_key_names_get_bracketed_paths():
    result = parse_comment(json.dumps({"APS": {"environment": "e", "anomaly_detection_config": {"my key": 1}}}))
    assert result.warnings[0].path == '$.APS.anomaly_detection_config["my key"]'


def test_deep_nesting_does_not_raise():
    deep = '{"APS": ' + "[" * 100_000 + "]" * 100_000 + "}"
    result = parse_comment(deep)
    assert result.status == INVALID


def test_huge_integer_does_not_raise():
    result = parse_comment('{"APS": {"environment": "e", "max_requeue_times": ' + "9" * 10_000 + "}}")
    assert result.status == INVALID


def test_huge_comment_is_refused_without_parsing():
    result = parse_comment('{"APS": {"environment": "e", "pad": "' + "x" * 2_000_000 + '"}}')
    assert result.status == INVALID


def test_non_string_input_does_not_raise():
    assert parse_comment(b'{"APS": {}}').status == NO_POLICY
    assert parse_comment(12).status == NO_POLICY


def test_to_dict_is_json_serialisable():
    for comment in (GUIDE_COMMENT, aps(mode="x"), "plain", None):
        payload = parse_comment(comment).to_dict()
        assert json.loads(json.dumps(payload)) == payload


# --- properties ---------------------------------------------------------------------------------

json_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=25,
)
policy_keys = st.sampled_from(
    [
        "workflow_id",
        "environment",
        "mode",
        "auto_resume_mode",
        "max_requeue_times",
        "log_file_paths_shared_across_attempts",
        "anomaly_detection_config",
        "extra",
    ]
)
anomaly_keys = st.sampled_from(
    [
        "log_based_timeout_enabled",
        "log_based_timeout_threshold_pretraining",
        "log_based_timeout_threshold_trainingloop",
        "straggler_detection_enabled",
        "other",
    ]
)
policy_like = st.dictionaries(
    policy_keys,
    json_values | st.dictionaries(anomaly_keys, json_values, max_size=5),
    max_size=8,
)


def assert_consistent(result: PolicyResult) -> None:
    assert result.status in (NO_POLICY, INVALID, VALID)
    assert isinstance(result.reason, str) and result.reason
    json.dumps(result.to_dict())
    if result.status == VALID:
        assert result.wrapper in ("APS", "HEIMDALL")
        assert result.errors == ()
        assert result.policy is not None
        policy = result.policy.to_dict()
        assert isinstance(policy["environment"], str) and policy["environment"].strip()
        assert policy["mode"] in ("observe", "act")
        assert policy["auto_resume_mode"] in ("requeue", "singleton_dependency")
        assert policy["max_requeue_times"] is None or (
            type(policy["max_requeue_times"]) is int and policy["max_requeue_times"] >= 0
        )
        assert type(policy["log_file_paths_shared_across_attempts"]) is bool
        config = policy["anomaly_detection_config"]
        assert type(config["log_based_timeout_enabled"]) is bool
        assert type(config["straggler_detection_enabled"]) is bool
        for key in ("log_based_timeout_threshold_pretraining", "log_based_timeout_threshold_trainingloop"):
            assert type(config[key]) is int and config[key] > 0
    elif result.status == INVALID:
        assert result.policy is None
        assert result.errors
    else:
        assert result.policy is None and result.errors == () and result.wrapper is None


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_any_text_never_raises(text):
    assert_consistent(parse_comment(text))


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_any_json_never_raises(value):
    assert_consistent(parse_comment(json.dumps(value)))


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(["APS", "HEIMDALL"]), policy_like | json_values)
def test_any_wrapped_value_is_valid_or_invalid_never_no_policy(wrapper, policy):
    result = parse_comment(json.dumps({wrapper: policy}))
    assert_consistent(result)
    assert result.status in (VALID, INVALID)
    assert result.wrapper == wrapper


@settings(max_examples=300, deadline=None)
@given(policy_like)
def test_valid_policies_keep_every_given_value(policy):
    policy = {**policy, "environment": "customer-slurm"}
    result = parse_comment(json.dumps({"APS": policy}))
    assert_consistent(result)
    if result.status == VALID:
        for key, value in policy.items():
            if key != "anomaly_detection_config":
                assert result.policy.to_dict()[key] == value
            else:
                for sub_key, sub_value in value.items():
                    assert result.policy.to_dict()[key][sub_key] == sub_value


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=30), st.text(max_size=30))
def test_text_around_a_policy_never_raises(prefix, suffix):
    assert_consistent(parse_comment(prefix + GUIDE_COMMENT + suffix))


def test_the_effective_policy_is_typed_and_round_trips_through_its_stored_json() -> None:
    result = parse_comment(aps(mode="act", team="vision", anomaly_detection_config={"xid_watch": True}))
    policy = result.policy
    assert isinstance(policy, EffectivePolicy) and policy.mode == "act"
    assert policy.anomaly_detection_config.log_based_timeout_threshold_trainingloop == 840
    assert EffectivePolicy.from_dict(policy.to_dict()) == policy
    assert policy.to_dict()["team"] == "vision" and policy.to_dict()["anomaly_detection_config"]["xid_watch"] is True


def test_stored_json_is_read_leniently() -> None:
    """A row written by an older version (or edited by hand) never breaks a reader: bad values are defaults."""
    stored = {"mode": "ACT", "max_requeue_times": "2", "anomaly_detection_config": {"log_based_timeout_enabled": "no"}}
    policy = EffectivePolicy.from_dict(stored)
    assert policy.mode == "observe" and policy.max_requeue_times is None
    assert policy.anomaly_detection_config.log_based_timeout_enabled is True
    assert EffectivePolicy.from_dict(None) == EffectivePolicy()
