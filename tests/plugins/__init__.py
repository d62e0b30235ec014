"""Pytest plugins for the real parts the tests need (databases, Slurm lab, OIDC provider)."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    """True when running under CI (CI=true), where a missing real part is a failure, not a skip."""
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def require(what: str, reason: str) -> NoReturn:
    """A real part is unavailable: fail under CI (integration tests must run there), else skip saying why."""
    if in_ci():
        pytest.fail(f"CI=true but {what} is unavailable: {reason}", pytrace=False)
    pytest.skip(f"{what} unavailable: {reason}")
