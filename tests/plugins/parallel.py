"""Parallel runs with pytest-xdist: which tests may run at the same time as which.

The whole suite (`pytest` naming no paths, as CI runs it) is spread over RECOVERY_TEST_WORKERS worker
processes (default 3: most lab tests wait on Slurm, so even a 2-core machine keeps three busy); a run
naming paths stays in one process unless RECOVERY_TEST_WORKERS says otherwise, and
RECOVERY_TEST_WORKERS=0 always runs in one process, as before.

Tests are handed out in groups (`--dist loadgroup` with the groups of `group_of`), a group to one worker:
* every test that uses a Slurm lab is in the group of that lab: `slurm-<release>` (`slurm_lab`, the
  `slurm` marker; tests of several releases at once go with the host's), `slurm-<release>-scratch`
  (only `slurm_scratch_lab`), `slurm-<release>-framework` (`slurm_framework_lab`: the real-PyTorch jobs,
  minutes each, on a lab of their own so the shared lab's group does not wait behind them), `slurm-rest` (the
  slurmrestd twin, also as `rest_lab` of the host's
  release). The tests of one lab run one after another in one process, exactly as in a serial run
  (they stop its daemons, wipe its state, count on its few CPUs). Different labs are separate daemons
  on separate ports, so their groups run side by side; `lab up`/`down` and a test's stopped daemon
  are serialised across workers (`lab_lock` in slurm_lab.py), so a lab brought up by two workers is
  started once and never during another's outage.
* every other test is grouped by module, so module-scoped fixtures are set up once, as before.
The lab groups are handed out first (largest first): they are the longest. Each worker has its own
databases (uniquely named on PostgreSQL), temp dirs and session fixtures (OIDC provider, Chromium).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.plugins.slurm_lab import host_version

DEFAULT_WORKERS = 3
LAB_FIXTURES = frozenset(
    {"slurm_lab", "slurm_scratch_lab", "slurm_framework_lab", "slurmrestd", "rest_lab", "slurm_version"}
)
LAB_GROUP = "slurm-"
_GROUPS_ENV = "RECOVERY_TEST_GROUPS_DIR"  # where workers write each test's group for the controller


def workers(config: pytest.Config) -> int:
    """RECOVERY_TEST_WORKERS, else DEFAULT_WORKERS for the whole suite and 0 (no xdist) for a run naming paths."""
    raw = os.environ.get("RECOVERY_TEST_WORKERS", "").strip()
    if raw:
        try:
            return max(0, int(raw))
        except ValueError:
            raise pytest.UsageError(f"RECOVERY_TEST_WORKERS must be a number of workers, not {raw!r}") from None
    return DEFAULT_WORKERS if config.args_source == pytest.Config.ArgsSource.TESTPATHS else 0


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (pyproject's addopts) means RECOVERY_TEST_WORKERS, see `workers`."""
    return workers(config)


def group_of(item: pytest.Item) -> str:
    """The xdist group of a test: the lab it uses (its release, its scratch lab, the REST twin), else its module."""
    fixtures = set(getattr(item, "fixturenames", ()))
    if not (LAB_FIXTURES & fixtures or item.get_closest_marker("slurm")):
        return item.nodeid.split("::", 1)[0]
    host = host_version()
    release = getattr(getattr(item, "callspec", None), "params", {}).get("slurm_version") or host
    # the twin's tests stop its slurmctld: every test that uses it (rest_lab on the host's release) in one group
    if "slurmrestd" in fixtures or ("rest_lab" in fixtures and release == host):
        return f"{LAB_GROUP}rest"
    if item.get_closest_marker("slurm_several_versions"):
        return f"{LAB_GROUP}{host}"
    if "slurm_scratch_lab" in fixtures and "slurm_lab" not in fixtures:  # a lab of its own (1 node, own ports)
        return f"{LAB_GROUP}{release}-scratch"
    if "slurm_framework_lab" in fixtures and "slurm_lab" not in fixtures:  # real frameworks: a lab of their own
        return f"{LAB_GROUP}{release}-framework"
    return f"{LAB_GROUP}{release}"


def pytest_configure(config: pytest.Config) -> None:
    """The controller of a parallel run gives its workers (which inherit its environment) a folder for the groups."""
    if not hasattr(config, "workerinput") and config.getoption("dist", "no") != "no":
        os.environ[_GROUPS_ENV] = tempfile.mkdtemp(prefix="recovery-test-groups-")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A worker writes the group of every test it collected (all workers collect the same tests).

    (xdist's own `xdist_group` marks cannot be used: they rewrite node ids, which pytest 9.2 no longer allows.)
    """
    folder = os.environ.get(_GROUPS_ENV)
    workerinput = getattr(config, "workerinput", None)
    if folder and workerinput:
        path = Path(folder) / f"{workerinput['workerid']}.json"
        path.with_suffix(".tmp").write_text(json.dumps({item.nodeid: group_of(item) for item in items}))
        path.with_suffix(".tmp").rename(path)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadgroup` with the groups of `group_of`, the lab groups handed out before everything else."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling  # type: ignore[import-untyped]

    class LabsFirst(LoadGroupScheduling):
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:  # called once every worker has collected (and so written its file)
                written = sorted(Path(os.environ[_GROUPS_ENV]).glob("*.json"))
                self.groups = json.loads(written[0].read_text()) if written else {}
            return self.groups.get(nodeid) or nodeid.split("::", 1)[0]

        def _assign_work_unit(self, node: Any) -> None:
            labs = [scope for scope in self.workqueue if scope.startswith(LAB_GROUP)]
            if labs:
                biggest = max(labs, key=lambda scope: len(self.workqueue[scope]))
                self.workqueue.move_to_end(biggest, last=False)
            super()._assign_work_unit(node)

    return LabsFirst(config, log)
