"""The xdist groups of lab tests (tests/plugins/parallel.py): which tests share a lab and so run one after another."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import pytest

from tests.plugins.parallel import group_of
from tests.plugins.slurm_lab import host_version


@dataclass
class Item:
    """What `group_of` reads of a collected test."""

    nodeid: str
    fixturenames: tuple[str, ...] = ()
    markers: tuple[str, ...] = ()
    callspec: Any = None

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self.markers else None


def group(item: Item) -> str:
    return group_of(cast(pytest.Item, item))


def test_real_framework_tests_have_a_lab_and_a_group_of_their_own() -> None:
    host = host_version()
    framework = Item("tests/e2e/test_real_pytorch.py::test_x", ("ctx", "slurm_framework_lab"), ("slurm",))
    shared = Item("tests/e2e/test_logs_slurm.py::test_y", ("ctx", "slurm_lab"), ("slurm",))
    scratch = Item("tests/worker/test_z.py::test_z", ("slurm_scratch_lab",), ())
    assert group(framework) == f"slurm-{host}-framework"
    assert group(shared) == f"slurm-{host}"
    assert group(scratch) == f"slurm-{host}-scratch"
    assert group(Item("tests/domain/test_a.py::test_a")) == "tests/domain/test_a.py"
