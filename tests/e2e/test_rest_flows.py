"""The lab's recovery flows (tests/e2e/test_recovery_flows.py) run unchanged through slurmrestd.

Each flow gets the JWT twin of the lab (tests/plugins/slurmrestd.py) instead of the lab; the
harness's worker then talks to slurmrestd (the twin's `scheduler`), and the flow submits,
waits and asserts exactly as on the lab. Any other flow written against `slurm_lab` and the
harness can be run through slurmrestd the same way.
"""

from __future__ import annotations

import pytest

from app.context import AppContext
from tests.e2e import test_recovery_flows as flows
from tests.plugins.slurmrestd import RestLab

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

FLOWS = sorted(name for name in vars(flows) if name.startswith("test_"))


@pytest.mark.parametrize("flow", FLOWS)
async def test_recovery_flow_through_slurmrestd(ctx: AppContext, slurmrestd: RestLab, flow: str) -> None:
    await getattr(flows, flow)(ctx, slurmrestd.slurm)
