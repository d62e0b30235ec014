"""What the dashboard reads from query strings and forms, through app.domain.edge.bounds: numbers in ASCII digits within
their range, text within its length. A value out of bounds raises BoundsError, which `guarded` answers with a 400
(never cut to fit: a node name cut to 200 characters names another node)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from app.domain.edge import bounds


def _text(value: Any, name: str, maximum: int) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise bounds.BoundsError(f"{name} must be text, not a file")
    return bounds.check_text(value.strip(), name, maximum=maximum) or ""


def query_text(request: Request, name: str, *, maximum: int = bounds.MAX_FILTER_LENGTH) -> str | None:
    """A query parameter as text (stripped; None when absent or blank); longer than `maximum` is a 400."""
    return _text(request.query_params.get(name), name, maximum) or None


def query_int(request: Request, name: str, *, minimum: int = 0, maximum: int = bounds.INT64_MAX) -> int | None:
    """A query parameter as an integer in ASCII digits within the range (None when absent or empty)."""
    return bounds.parse_optional_int(request.query_params.get(name), name, minimum=minimum, maximum=maximum)


def form_text(form: Any, name: str, *, maximum: int = bounds.MAX_FILTER_LENGTH) -> str:
    """A form field as text (stripped; "" when absent); longer than `maximum` is a 400."""
    return _text(form.get(name), name, maximum)


def form_int(form: Any, name: str, *, minimum: int = 0, maximum: int = bounds.INT64_MAX) -> int:
    """A form field that must hold an integer in ASCII digits within the range (spaces a person typed around it are
    dropped)."""
    return bounds.parse_int(form_text(form, name, maximum=40), name, minimum=minimum, maximum=maximum)
