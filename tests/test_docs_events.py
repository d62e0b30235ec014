"""Every audit event type the code writes is listed in docs/troubleshooting.md's event table (issue 26)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# event_type="x.y" literals, and the drain events app/fleet/service.py maps from a rule's outcome
LITERAL = re.compile(r'event_type="([a-z_]+\.[a-z_]+)"')
MAPPED = re.compile(r'"(node\.[a-z_]+)"')
# event_type=f"…{…}" forms, with the values their placeholder takes
FORMED = {
    "scheduler.": ("requeue_hold", "update_exclusions", "release", "cancel"),
    "checkpoint.": ("saved", "loaded", "failed"),
    "node.": ("cleared", "pinned", "unpinned"),
}


def _written() -> set[str]:
    found: set[str] = set()
    for path in [*ROOT.joinpath("app").rglob("*.py"), *ROOT.joinpath("worker").rglob("*.py")]:
        text = path.read_text()
        found |= set(LITERAL.findall(text))
        if path.name == "service.py" and path.parent.name == "fleet":
            found |= set(MAPPED.findall(text))
    found |= {prefix + value for prefix, values in FORMED.items() for value in values}
    return found


def test_every_event_type_is_in_the_troubleshooting_table() -> None:
    written = _written()
    assert len(written) > 40  # the scan found the code's events (not an empty pass)
    table = ROOT.joinpath("docs", "troubleshooting.md").read_text()
    missing = sorted(t for t in written if f"`{t}`" not in table)
    assert missing == [], f"add these event types to docs/troubleshooting.md's table: {missing}"
