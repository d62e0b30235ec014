"""The glossary page: each term the dashboard explains in a tooltip, and exit codes (presentation/glossary.py)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from app.domain.presentation import glossary
from views.auth import guarded
from views.render import render


@guarded()
async def glossary_page(request: Request) -> Response:
    """Terms, exit codes and signals in plain words."""
    signals = [(128 + n, name, text) for n, (name, text) in glossary.SIGNALS.items()]
    return render(
        request,
        "glossary.html",
        {"terms": glossary.TERMS, "exit_codes": glossary.EXIT_CODES.items(), "signals": signals},
    )
