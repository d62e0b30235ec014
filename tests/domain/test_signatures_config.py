"""Operators' TOML signature file: override by name, disable, add, benign exclusions, errors."""

import pytest

from app.domain.detection.rules_builtin import DEFAULT_RULES
from app.domain.detection.rules_file import SignatureConfigError, parse_signature_config
from app.domain.detection.signatures import Classifier


def test_empty_config_is_the_defaults():
    assert parse_signature_config("").rules == DEFAULT_RULES


def test_add_a_new_crash_category_with_derived_anchors():
    rules = parse_signature_config("""
[[crash]]
name = "app_fatal"
category = "APP_FATAL"
pattern = 'FATAL: (?P<detail>.+)'
""")
    found = Classifier(rules).crash("FATAL: data shard missing")
    assert found is not None and found.category == "APP_FATAL"
    assert rules.by_name("app_fatal").anchors == ("FATAL: ",)


def test_override_a_default_by_name_keeps_unspecified_fields():
    rules = parse_signature_config("""
[[crash]]
name = "nan_loss"
anchors = ["loss went NaN"]
pattern = 'loss went NaN'
""")
    rule = rules.by_name("nan_loss")
    assert rule.label == "NAN_LOSS" and rule.source == "config"
    classifier = Classifier(rules)
    assert classifier.crash("loss went NaN at step 3").category == "NAN_LOSS"
    assert classifier.crash("step 3: loss is NaN") is None


def test_disable_a_default():
    rules = parse_signature_config('disable = ["slurm_time_limit"]')
    assert rules.by_name("slurm_time_limit") is None
    assert Classifier(rules).crash("*** JOB 1 ON n1 CANCELLED AT 2026-01-01T00:00:00 DUE TO TIME LIMIT ***") is None


def test_new_progress_marker_and_benign_exclusion():
    rules = parse_signature_config("""
[[progress]]
name = "my_heartbeat"
phase = "trainingloop"
anchors = ["HB step="]
pattern = 'HB step=(?P<iteration>\\d+)'

[[benign]]
name = "drill"
anchors = ["[DRILL]"]
pattern = '\\[DRILL\\]'

[[benign]]
name = "rehearsal"
anchors = ["[REHEARSAL]"]
pattern = 'simulated'
""")
    classifier = Classifier(rules)
    marker = classifier.progress("HB step=42")
    assert marker.phase == "trainingloop" and marker.iteration == 42
    assert classifier.crash("[DRILL] Segmentation fault (simulated)") is None
    assert classifier.crash("Segmentation fault") is not None
    assert classifier.crash("[REHEARSAL] Segmentation fault (simulated)") is None
    assert classifier.crash("Segmentation fault (simulated)") is not None  # a benign rule needs its anchor


def test_new_rules_take_precedence_over_defaults():
    rules = parse_signature_config("""
[[crash]]
name = "oom_is_host"
category = "HOST_OOM"
anchors = ["CUDA out of memory"]
pattern = 'CUDA out of memory'
""")
    assert Classifier(rules).crash("CUDA out of memory").category == "HOST_OOM"


@pytest.mark.parametrize(
    "text,needle",
    [
        ("[[crash]\nname=", "not valid TOML"),
        ("[[crash]]\ncategory = 'X'\npattern = 'x+'", "name"),
        ("[[crash]]\nname = 'a'\ncategory = 'lower'\npattern = 'abc'", "UPPER_SNAKE_CASE"),
        ("[[crash]]\nname = 'a'\ncategory = 'A'\npattern = '(abc'", "not a valid regex"),
        ("[[crash]]\nname = 'a'\ncategory = 'A'\npattern = '.*'", "anchors"),
        ("[[progress]]\nname = 'p'\nphase = 'warmup'\npattern = 'abc'", "phase"),
        ("[[checkpoint]]\nname = 'c'\nkind = 'deleted'\npattern = 'abc'", "kind"),
        ("[[throughput]]\nname = 't'\nmetric = 'x'\npattern = 'speed: \\\\d+'", "value"),
        ("disable = ['no_such_rule']", "unknown rules"),
        ("[[checkpoint]]\nname = 'nan_loss'", "default crash rule"),
        ("bogus = 1", "unknown top-level"),
        ("[[crash]]\nname = 'a'\ncategory = 'A'\npattern = 'abc'\ncolour = 'red'", "unknown keys"),
        ("disable = ['segfault']\n[[crash]]\nname = 'segfault'\npattern = 'SEGV'", "both disabled and overridden"),
    ],
)
def test_bad_configs_are_rejected_with_a_reason(text, needle):
    with pytest.raises(SignatureConfigError, match=needle):
        parse_signature_config(text)
