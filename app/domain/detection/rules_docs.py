"""The "Built-in rules" section of docs/signatures.md, from the rules (`python -m app.domain.detection.rules_docs`)."""

from __future__ import annotations

import sys
from pathlib import Path

from app.domain.decision.rootcause import outlook_of
from app.domain.detection.rules_builtin import DEFAULT_RULES
from app.domain.detection.signatures import Rule

HEADING = "## Built-in rules"
SECTIONS = (
    ("crash", "Crash signatures (`[[crash]]`, label key `category`)"),
    ("benign", "Benign exclusions (`[[benign]]`)"),
    ("checkpoint", "Checkpoint events (`[[checkpoint]]`, label key `kind`)"),
    ("progress", "Progress markers (`[[progress]]`, label key `phase`)"),
    ("throughput", "Throughput figures (`[[throughput]]`, label key `metric`)"),
)


def _entry(rule: Rule) -> str:
    """One rule's entry; an anchor's trailing newline (a line end) is shown as ⏎."""
    head = f"* **`{rule.name}`**"
    if rule.kind == "crash":
        outlook = outlook_of(category=rule.label, rule=rule.name)
        head += f" → `{rule.label}` (outlook {outlook})"
    elif rule.kind != "benign":
        head += f" → `{rule.label}`" + (f" ({rule.framework})" if rule.framework else "")
    lines = [
        head,
        "  * anchors: " + ", ".join(f"`` {anchor.replace(chr(10), '⏎')} ``" for anchor in rule.anchors),
        f"  * pattern: `` {rule.pattern} ``",
    ]
    if rule.exclude:
        lines.append(f"  * exclude: `` {rule.exclude} ``")
    lines.append(f"  * example: `` {rule.example} ``")
    return "\n".join(lines)


def render(rules: tuple[Rule, ...] = DEFAULT_RULES) -> str:
    """The section text, from its heading to the end of the file."""
    parts = [HEADING, ""]
    for kind, title in SECTIONS:
        parts += [f"### {title}", ""]
        parts += [_entry(rule) for rule in rules if rule.kind == kind]
        parts.append("")
    return "\n".join(parts)


def main() -> int:
    path = Path(__file__).resolve().parents[3] / "docs" / "signatures.md"
    text = path.read_text(encoding="utf-8")
    head = text.split(HEADING, 1)[0]
    path.write_text(head + render(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
