"""Text from elsewhere made safe to print on a terminal: a workflow id, a story or a server's error message can
hold escape sequences (ESC, OSC, CSI) that recolour, retitle, hide or rewrite what the operator sees. Pure."""

from __future__ import annotations

import re

# C0 controls (tab, CR and LF included: each printed line is built by the caller), DEL, the C1 controls (U+0080..
# U+009F: 8-bit CSI/OSC), and the Unicode format characters that reorder or hide text (bidi overrides and
# isolates, zero-width joiners are harmless and kept).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def terminal_text(value: object) -> str:
    """`value` as text with every control character removed (a lone `[31m` may remain; it does nothing)."""
    return _UNSAFE.sub("", str(value))
