"""Operators' signature file: TOML text in, effective RuleSet out (reading the file happens elsewhere)."""

from __future__ import annotations

import re
import tomllib
from dataclasses import replace
from typing import Any

from app.domain.detection.rules_builtin import DEFAULT_RULES
from app.domain.detection.signatures import CHECKPOINT_KINDS, PHASES, Rule, RuleSet

# TOML table name -> rule kind.
SECTIONS = {
    "crash": "crash",
    "checkpoint": "checkpoint",
    "progress": "progress",
    "throughput": "throughput",
    "benign": "benign",
}
_LABEL_KEY = {"crash": "category", "checkpoint": "kind", "progress": "phase", "throughput": "metric", "benign": None}
_ALLOWED = {
    "name",
    "anchors",
    "pattern",
    "framework",
    "exclude",
    "scale",
    "example",
    "category",
    "kind",
    "phase",
    "metric",
}
_CATEGORY = re.compile(r"^[A-Z][A-Z0-9_]*$")


class SignatureConfigError(ValueError):
    """The signatures file cannot be used; the message names the offending entry."""


def _literal_runs(pattern: str) -> list[str] | None:
    """Anchors derived from a regex: the longest literal run of each top-level alternative."""
    try:
        from re import _parser  # type: ignore[attr-defined]  # stable in CPython 3.11+

        parsed = _parser.parse(pattern)
    except Exception:
        return None
    items = list(parsed)
    branches: list[list[Any]]
    if len(items) == 1 and items[0][0] == _parser.BRANCH:
        branches = [list(b) for b in items[0][1][1]]
    elif (
        len(items) == 1
        and items[0][0] == _parser.SUBPATTERN
        and len(list(items[0][1][-1])) == 1
        and list(items[0][1][-1])[0][0] == _parser.BRANCH
    ):
        branches = [list(b) for b in list(items[0][1][-1])[0][1][1]]
    else:
        branches = [items]
    anchors = []
    for branch in branches:
        best, run = "", ""
        for op, arg in branch:
            if op == _parser.LITERAL:
                run += chr(arg)
                best = max(best, run, key=len)
            else:
                run = ""
        if len(best) < 3:
            return None
        anchors.append(best)
    return anchors


def _rule_from_entry(kind: str, entry: dict[str, Any], where: str, base: Rule | None) -> Rule:
    unknown = set(entry) - _ALLOWED
    if unknown:
        raise SignatureConfigError(f"{where}: unknown keys {', '.join(sorted(unknown))}")
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        raise SignatureConfigError(f"{where}: `name` (a non-empty string) is required")
    fields: dict[str, Any] = {}
    label_key = _LABEL_KEY[kind]
    if label_key and label_key in entry:
        label = entry[label_key]
        if not isinstance(label, str):
            raise SignatureConfigError(f"{where}: `{label_key}` must be a string")
        if kind == "crash" and not _CATEGORY.match(label):
            raise SignatureConfigError(f"{where}: category {label!r} must be UPPER_SNAKE_CASE")
        if kind == "checkpoint" and label not in CHECKPOINT_KINDS:
            raise SignatureConfigError(f"{where}: kind must be one of {', '.join(CHECKPOINT_KINDS)}")
        if kind == "progress" and label not in PHASES:
            raise SignatureConfigError(f"{where}: phase must be one of {', '.join(PHASES)}")
        fields["label"] = label
    for key in ("pattern", "framework", "exclude", "example"):
        if key in entry:
            if not isinstance(entry[key], str):
                raise SignatureConfigError(f"{where}: `{key}` must be a string")
            fields[key] = entry[key]
    if "scale" in entry:
        if isinstance(entry["scale"], bool) or not isinstance(entry["scale"], (int, float)):
            raise SignatureConfigError(f"{where}: `scale` must be a number")
        fields["scale"] = float(entry["scale"])
    if "anchors" in entry:
        anchors = entry["anchors"]
        if (
            not isinstance(anchors, list)
            or not anchors
            or not all(isinstance(a, str) and a and "\n" not in a for a in anchors)
        ):
            raise SignatureConfigError(f"{where}: `anchors` must be a non-empty list of non-empty single-line strings")
        fields["anchors"] = tuple(anchors)
    if base is None:
        if "pattern" not in fields:
            raise SignatureConfigError(f"{where}: a new rule needs `pattern`")
        if label_key and "label" not in fields:
            raise SignatureConfigError(f"{where}: a new {kind} rule needs `{label_key}`")
        fields.setdefault("anchors", ())
        rule = Rule(name=name, kind=kind, pattern=fields.pop("pattern"), source="config", **fields)
    else:
        if base.kind != kind:
            raise SignatureConfigError(f"{where}: {name!r} is a default {base.kind} rule, not {kind}")
        rule = replace(base, source="config", **fields)
        if "pattern" in fields and "anchors" not in fields:
            rule = replace(rule, anchors=())
    for key, value in (("pattern", rule.pattern), ("exclude", rule.exclude)):
        if value:
            try:
                re.compile(value)
            except re.error as exc:
                raise SignatureConfigError(f"{where}: `{key}` is not a valid regex: {exc}") from None
    if kind == "throughput" and "value" not in re.compile(rule.pattern).groupindex:
        raise SignatureConfigError(f"{where}: a throughput pattern needs a (?P<value>...) group")
    if not rule.anchors:
        derived = _literal_runs(rule.pattern)
        if not derived:
            raise SignatureConfigError(
                f"{where}: cannot derive literal anchors from the pattern; list `anchors` explicitly"
            )
        rule = replace(rule, anchors=tuple(derived))
    return rule


def parse_signature_config(text: str, *, defaults: tuple[Rule, ...] = DEFAULT_RULES) -> RuleSet:
    """Apply an operator's TOML (override by name, disable, add) on top of the defaults."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SignatureConfigError(f"not valid TOML: {exc}") from None
    unknown = set(data) - set(SECTIONS) - {"disable"}
    if unknown:
        raise SignatureConfigError(f"unknown top-level keys: {', '.join(sorted(unknown))}")
    disable = data.get("disable", [])
    if not isinstance(disable, list) or not all(isinstance(n, str) for n in disable):
        raise SignatureConfigError("`disable` must be a list of rule names")
    by_name = {rule.name: rule for rule in defaults}
    missing = [n for n in disable if n not in by_name]
    if missing:
        raise SignatureConfigError(f"`disable` names unknown rules: {', '.join(missing)}")
    overrides: dict[str, Rule] = {}
    added: list[Rule] = []
    seen: set[str] = set()
    for section, kind in SECTIONS.items():
        entries = data.get(section, [])
        if not isinstance(entries, list):
            raise SignatureConfigError(f"`{section}` must be an array of tables ([[{section}]])")
        for index, entry in enumerate(entries):
            where = f"{section}[{index}]"
            if not isinstance(entry, dict):
                raise SignatureConfigError(f"{where}: must be a table")
            name = entry.get("name")
            if name in seen:
                raise SignatureConfigError(f"{where}: rule {name!r} is defined twice")
            rule = _rule_from_entry(kind, entry, where, by_name.get(name) if isinstance(name, str) else None)
            seen.add(rule.name)
            if rule.name in by_name:
                overrides[rule.name] = rule
            else:
                added.append(rule)
    both = set(disable) & set(overrides)
    if both:
        raise SignatureConfigError(f"rules both disabled and overridden: {', '.join(sorted(both))}")
    disabled = set(disable)
    # Operators' new rules go first: within a kind the first match wins, so they take precedence.
    effective = tuple(added) + tuple(overrides.get(rule.name, rule) for rule in defaults if rule.name not in disabled)
    return RuleSet(effective)
