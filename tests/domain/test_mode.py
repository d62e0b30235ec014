"""Mode resolution (act needs the job, the operator's ceiling and a managed partition) and admission."""

from __future__ import annotations

import itertools
import json

import pytest

from app.domain.admission.mode import (
    ACT,
    ENROLLED,
    ENVIRONMENT_MISMATCH,
    NO_POLICY_ADMISSION,
    NOT_ENROLLED,
    OBSERVE,
    UNMANAGED_PARTITION,
    admission,
    resolve_mode,
)
from app.domain.admission.policy import parse_comment


@pytest.mark.parametrize(
    ("requested", "acknowledged", "managed"),
    list(itertools.product([None, "observe", "act", "ACT", "bogus"], [False, True], [False, True])),
)
def test_act_only_when_requested_acknowledged_and_managed(requested, acknowledged, managed):
    decision = resolve_mode(requested=requested, acknowledged=acknowledged, partition_managed=managed)
    expected = ACT if (requested == "act" and acknowledged and managed) else OBSERVE
    assert decision.mode == expected
    assert decision.requested == requested
    assert decision.reason


def test_ceiling_off_names_the_setting():
    decision = resolve_mode(requested="act", acknowledged=False, partition_managed=True)
    assert decision.mode == OBSERVE
    assert "RECOVERY_ACKNOWLEDGE_SCHEDULER_ACTIONS" in decision.reason
    assert "partition" not in decision.reason


def test_unmanaged_partition_is_the_reason_when_the_ceiling_is_on():
    decision = resolve_mode(requested="act", acknowledged=True, partition_managed=False)
    assert decision.mode == OBSERVE
    assert "managed" in decision.reason
    assert "acknowledgment" not in decision.reason


def test_both_blockers_are_named():
    reason = resolve_mode(requested="act", acknowledged=False, partition_managed=False).reason
    assert "acknowledgment" in reason and "allowlist" in reason


def test_no_request_means_observe_by_default():
    assert "default" in resolve_mode(requested=None, acknowledged=True, partition_managed=True).reason


def policy(**fields: object):
    return parse_comment(json.dumps({"APS": {"environment": "customer-slurm", **fields}}))


def test_admission_enrols_a_matching_valid_policy():
    result = admission(policy(), environment="customer-slurm", partition_managed=True)
    assert result.status == ENROLLED and result.enrolled


@pytest.mark.parametrize("operator_env", ["Customer-slurm", "customer-slurm ", "customer", "default"])
def test_environment_match_is_exact_and_case_sensitive(operator_env):
    result = admission(policy(), environment=operator_env, partition_managed=True)
    assert result.status == ENVIRONMENT_MISMATCH
    assert not result.enrolled
    assert "customer-slurm" in result.reason


def test_case_only_mismatch_gets_a_hint():
    assert "case" in admission(policy(), environment="Customer-Slurm", partition_managed=True).reason


def test_unmanaged_partition_is_not_enrolled():
    assert admission(policy(), environment="customer-slurm", partition_managed=False).status == UNMANAGED_PARTITION


def test_environment_mismatch_wins_over_partition():
    assert admission(policy(), environment="other", partition_managed=False).status == ENVIRONMENT_MISMATCH


def test_invalid_policy_is_not_enrolled_with_the_parser_reason():
    parsed = policy(mode="ACT")
    result = admission(parsed, environment="customer-slurm", partition_managed=True)
    assert result.status == NOT_ENROLLED
    assert result.reason == parsed.reason


def test_ordinary_comment_has_no_policy():
    result = admission(parse_comment("just a note"), environment="customer-slurm", partition_managed=True)
    assert result.status == NO_POLICY_ADMISSION
    assert not result.enrolled
