"""The ceiling flip on the real Slurm lab: a decision taken in observe mode is never carried out later.

A job that asks for act fails while the operator's acknowledgment ceiling is off: its Advice is decided in
observe mode (PENDING / NOT_AUTHORIZED, SHADOW actions only). The installation restarts with the ceiling on
(settings are read at start): the old Advice is closed DECIDED_IN_OBSERVE and the job stays as it was (no
requeue, no command in the scheduler actions), while a job that fails after the flip is requeued. An operator's
"decide again now" (GraphQL, dev mode's operator) then makes a new Advice for the old failure, which is carried out.
"""

from __future__ import annotations

import httpx
import pytest

from app.advice.models import Advice
from app.api.ids import to_global_id
from app.domain.decision.gate import DECIDED_IN_OBSERVE_TEXT
from app.infra.context import AppContext
from app.main import create_app
from tests.api.helpers import operation
from tests.e2e.harness import (
    advice_done,
    advice_list,
    batch_script,
    eventually,
    lab_context,
    milestones,
    policy_comment,
    running_worker,
    unique_environment,
)
from tests.plugins.slurm_lab import SlurmLab
from worker.runner import WorkerRunner

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

# Attempt 0 runs a few seconds (so the worker sees it running) and fails; a retry completes.
FAILS_ONCE = 'if [ -z "$SLURM_RESTART_COUNT" ]; then echo attempt 0; sleep 4; exit 1; fi\necho "retry ran"\n'


async def _observe_decided(ctx: AppContext, job_id: int) -> Advice | None:
    found = [a for a in await advice_list(ctx, job_id) if a.disposition_reason == "NOT_AUTHORIZED"]
    shadows = [m for m in await milestones(ctx, job_id) if m.status == "SHADOW"]
    return found[0] if found and shadows else None


async def _more_controller_ticks(runner: WorkerRunner, count: int) -> None:
    """Room for a wrong command to show: the controller ticks ``count`` more times."""
    [controller] = [s for s in runner.services if s.name == "controller"]
    base = controller.ticks

    async def done() -> bool:
        return controller.ticks >= base + count

    await eventually(done, what=f"{count} more controller ticks")


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)  # the rule runs on both in tests/worker
async def test_turning_the_ceiling_on_acts_on_new_failures_only(ctx: AppContext, slurm_lab: SlurmLab) -> None:
    env = unique_environment()
    off = lab_context(ctx, env, acknowledge_scheduler_actions=False)
    async with running_worker(off, slurm_lab):
        old_job = slurm_lab.submit(batch_script(policy_comment(env), FAILS_ONCE))
        decided = await eventually(lambda: _observe_decided(off, old_job), what="an observe-mode Advice with shadows")
    assert (decided.operation, decided.mode) == ("RESTART", "observe")
    assert (decided.disposition_message or "").startswith(DECIDED_IN_OBSERVE_TEXT)
    assert slurm_lab.state(old_job) == "FAILED"

    on = lab_context(ctx, env, dev_no_auth=True)  # minutes later: restarted with the ceiling on
    async with running_worker(on, slurm_lab) as runner:
        closed = await eventually(lambda: advice_done(on, old_job, 0), what="the old Advice closed")
        await _more_controller_ticks(runner, 5)
        assert (closed.disposition, closed.disposition_reason) == ("ABANDONED", "DECIDED_IN_OBSERVE")
        assert (closed.disposition_message or "").startswith(DECIDED_IN_OBSERVE_TEXT)
        assert {m.status for m in await milestones(on, old_job)} == {"SHADOW"}  # no command in the action log
        assert slurm_lab.scontrol_show(old_job)["Restarts"] == "0" and slurm_lab.state(old_job) == "FAILED"

        new_job = slurm_lab.submit(batch_script(policy_comment(env), FAILS_ONCE))  # fails after the flip
        acted = await eventually(lambda: advice_done(on, new_job, 0), what="the new failure's Advice converged")
        assert (acted.mode, acted.disposition, acted.disposition_reason) == (
            "act",
            "CONVERGED",
            "DESIRED_STATE_OBSERVED",
        )
        sent = await milestones(on, new_job)
        assert [(m.step, m.status) for m in sent] == [("requeue_hold", "SUCCEEDED"), ("release", "SUCCEEDED")]
        assert all((m.gate or "").startswith("allowed (ALLOWED)") for m in sent)
        assert slurm_lab.scontrol_show(new_job)["Restarts"] == "1"
        assert slurm_lab.scontrol_show(old_job)["Restarts"] == "0"

        # "decide again now" for the old, still recent failure: a new Advice, decided now in act mode, carried out
        app = create_app(on.settings, ctx=on)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as http:
            response = await http.post(
                "/graphql",
                json={"query": operation("DecideAdviceAgain"), "variables": {"id": to_global_id("Advice", closed.id)}},
            )
        body = response.json()
        assert "errors" not in body, body
        assert body["data"]["decideAdviceAgain"]["modeAtDecision"] == "act"

        async def redecided_converged() -> Advice | None:
            found = [
                a for a in await advice_list(on, old_job) if a.decision_round == 2 and a.disposition == "CONVERGED"
            ]
            return found[0] if found else None

        again = await eventually(redecided_converged, what="the re-decided Advice converged")
    assert (again.supersedes_id, again.disposition_reason) == (closed.id, "DESIRED_STATE_OBSERVED")
    assert slurm_lab.scontrol_show(old_job)["Restarts"] == "1"
    old = [a for a in await advice_list(on, old_job) if a.id == closed.id][0]
    assert (old.superseded_by_id, old.disposition_reason) == (again.id, "DECIDED_IN_OBSERVE")
    assert {m.status for m in await milestones(on, old_job) if m.advice_id == closed.id} == {"SHADOW"}
