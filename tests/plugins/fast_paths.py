"""RECOVERY_FAST_PATHS in the tests: the whole run with the fast paths off, or the tests that exercise them both ways.

* `RECOVERY_FAST_PATHS=off pytest …` runs every test with the fast paths off: every Settings a test builds
  (`Settings.build`, which `Settings.from_env` also ends in) gets `fast_paths=False` unless the test names it,
  and every process a test starts inherits the variable.
* A run without the variable (CI's `pytest`) runs every test with the fast paths on (the default) and, besides,
  the tests of BOTH_WAYS a second time with them off (ids `fast-on` / `fast-off`): every API test (the GraphQL
  executor and PostgreSQL's direct reads serve every page), the worker tests whose observer registers jobs
  through the fake scheduler, and one lab end-to-end recovery, on each database.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from app.infra.config import SETTINGS, Settings

ENV = "RECOVERY_FAST_PATHS"
BOTH_WAYS = (
    "tests/api/",
    "tests/worker/test_observer_unit.py",
    "tests/worker/test_observer_batch.py",
    "tests/worker/test_controller.py",
    "tests/e2e/test_recovery_flows.py::test_failed_job_with_checkpoint_is_requeued_and_resumes",
)
_PARSE = next(s.parse for s in SETTINGS if s.attr == "fast_paths")


def whole_run() -> bool | None:
    """The run's mode from RECOVERY_FAST_PATHS (None: not set, the tests of BOTH_WAYS run both ways)."""
    raw = os.environ.get(ENV)
    return None if raw is None else bool(_PARSE(raw))


def _with_fast_paths(value: bool) -> Any:
    original = Settings.build.__func__  # type: ignore[attr-defined]

    def build(cls: type[Settings], **values: Any) -> Settings:
        values.setdefault("fast_paths", value)
        return original(cls, **values)

    return classmethod(build)


def pytest_configure(config: pytest.Config) -> None:
    mode = whole_run()
    if mode is not None:  # for the whole run (session fixtures too); processes inherit the variable
        Settings.build = _with_fast_paths(mode)  # type: ignore[method-assign]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """The tests of BOTH_WAYS run with the fast paths on and off, unless the run has one mode."""
    if whole_run() is not None or "fast_paths" not in metafunc.fixturenames:
        return
    nodeid = metafunc.definition.nodeid
    if any(nodeid.startswith(prefix) for prefix in BOTH_WAYS):
        metafunc.parametrize("fast_paths", [True, False], ids=["fast-on", "fast-off"], indirect=True)


@pytest.fixture(autouse=True)
def fast_paths(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[bool]:
    """Whether this test runs with the fast paths on (see the module docstring)."""
    value = getattr(request, "param", None)
    if value is None:
        mode = whole_run()
        yield True if mode is None else mode
        return
    monkeypatch.setattr(Settings, "build", _with_fast_paths(value))
    monkeypatch.setenv(ENV, "on" if value else "off")
    yield value
