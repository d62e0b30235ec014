"""WCAG AA for every chip and text of the dashboard, computed from static/*.css (and the timeline's SVG colours)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from views import timeline

STATIC = Path(__file__).resolve().parents[2] / "static"
AA = 4.5
TOPBAR = "#111827"
# Where a rule sets a text colour but no background, the text sits on one of these.
PAGE_BACKGROUNDS = ("--bg", "--card")


def _rules(css: str) -> list[tuple[str, dict[str, str]]]:
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    css = re.sub(r"@media[^{]*\{((?:[^{}]*\{[^{}]*\})*)\s*\}", r"\1", css)  # flatten media blocks
    rules = []
    for selectors, body in re.findall(r"([^{}]+)\{([^{}]*)\}", css):
        decls = {}
        for decl in body.split(";"):
            name, _, value = decl.partition(":")
            if value.strip():
                decls[name.strip()] = value.strip()
        for selector in selectors.split(","):
            rules.append((" ".join(selector.split()), decls))
    return rules


def _hex(value: str, variables: dict[str, str]) -> str | None:
    value = value.strip()
    found = re.fullmatch(r"var\((--[\w-]+)\)", value)
    if found:
        return _hex(variables.get(found.group(1), ""), variables)
    if re.fullmatch(r"#[0-9a-fA-F]{3}", value):
        return "#" + "".join(c * 2 for c in value[1:])
    if re.fullmatch(r"#[0-9a-fA-F]{6}", value):
        return value.lower()
    first = value.split()[0] if value else ""
    return _hex(first, variables) if first != value else None


def _luminance(colour: str) -> float:
    channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(a: str, b: str) -> float:
    la, lb = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def pairs() -> list[tuple[str, str, str]]:
    """(where, text colour, background colour) for every text-bearing rule of the stylesheets."""
    rules = [
        r for path in sorted(STATIC.glob("*.css")) if "graphiql-3" not in path.name for r in _rules(path.read_text())
    ]
    variables = {k: v for sel, decls in rules if sel == ":root" for k, v in decls.items() if k.startswith("--")}
    by_selector: dict[str, dict[str, str]] = {}
    for sel, decls in rules:
        by_selector.setdefault(sel, {}).update(decls)

    def background(decls: dict[str, str]) -> str | None:
        return _hex(decls.get("background-color") or decls.get("background") or "", variables)

    out = []
    for sel, decls in by_selector.items():
        if sel == ":root" or "swatch" in sel or sel.endswith(("::before", ":hover")) and "color" not in decls:
            continue
        colour = _hex(decls.get("color", ""), variables)
        bg = background(decls)
        if colour is None and bg is None:
            continue
        if colour is None:  # a chip colours its background; its text colour comes from the base rule
            base = ".state" if sel.startswith(".state-") else re.split(r"[.#:\[ ]", sel, maxsplit=1)[0]
            colour = _hex(by_selector.get(base, {}).get("color", ""), variables) or _hex("var(--fg)", variables)
        assert colour is not None, sel
        if bg is None:  # the nearest enclosing rule with a background: `.jump input::placeholder` -> `.jump input`
            parent = sel
            while bg is None and parent:
                stripped = re.sub(r"::?[\w-]+$", "", parent)  # a pseudo-element or -class first
                parent = (stripped if stripped != parent else re.sub(r"\s*\S+$", "", parent)).strip()
                bg = background(by_selector.get(parent, {})) if parent else None
        if bg is None:
            grounds = (
                [TOPBAR] if sel.startswith(".topbar") else [_hex(f"var({v})", variables) for v in PAGE_BACKGROUNDS]
            )
            out += [(sel, colour, g) for g in grounds if g]
        else:
            out.append((sel, colour, bg))
    return out


def test_the_parser_sees_the_chips_the_issue_measured() -> None:
    seen = {sel for sel, _, _ in pairs()}
    for sel in (".state-completed", ".state-pending", ".state-failed", ".disp-converged", ".muted", ".badge.warn"):
        assert sel in seen, sel


@pytest.mark.parametrize(
    "where,fg,bg", pairs(), ids=lambda v: v if isinstance(v, str) and not v.startswith("#") else ""
)
def test_every_text_meets_wcag_aa(where: str, fg: str, bg: str) -> None:
    assert contrast(fg, bg) >= AA, f"{where}: {fg} on {bg} is {contrast(fg, bg):.2f}:1"


def test_timeline_labels_meet_wcag_aa() -> None:
    for group, fill in timeline.STATE_COLOURS.items():
        assert contrast("#ffffff", fill) >= AA, f"white span label on {group} {fill}"
    for group, fill in timeline.STATE_COLOURS.items():  # end labels are written in their state's colour
        assert contrast(fill, "#ffffff") >= AA and contrast(fill, timeline.FOCUS_FILL) >= AA, group
    for name, fill in timeline.TEXT_COLOURS.items():
        assert contrast(fill, "#ffffff") >= AA, f"{name} text {fill} on white"
        assert contrast(fill, timeline.FOCUS_FILL) >= AA, f"{name} text {fill} on the focus row"


def test_contrast_formula() -> None:
    assert round(contrast("#ffffff", "#000000"), 1) == 21.0
    assert round(contrast("#16a34a", "#ffffff"), 1) == 3.3  # the COMPLETED chip the issue measured
