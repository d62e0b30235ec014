"""docs/signatures.md documents every built-in rule with its example line."""

from pathlib import Path

from app.domain.detection.rules_builtin import DEFAULT_RULES

DOC = (Path(__file__).resolve().parents[2] / "docs" / "signatures.md").read_text(encoding="utf-8")


def test_every_default_rule_is_documented_with_its_example():
    for rule in DEFAULT_RULES:
        assert f"**`{rule.name}`**" in DOC, rule.name
        assert rule.example in DOC, rule.name


def test_the_documented_example_file_is_valid():
    from app.domain.detection.rules_file import parse_signature_config
    from app.domain.detection.signatures import Classifier

    example = DOC.split("```toml\n", 1)[1].split("```", 1)[0]
    rules = parse_signature_config(example)
    classifier = Classifier(rules)
    assert classifier.crash("FATAL: disk gone on node9").nodes == ("node9",)
    assert classifier.checkpoint("CKPT OK step=7 path=/c/7").iteration == 7
    assert rules.by_name("slurm_time_limit") is None
