"""Slurm 25.11+'s expedited requeue on the real 26.05 lab (SlurmctldParameters=enable_expedited_requeue): a job
submitted with `--requeue=expedite` that Slurm requeues by itself on a node failure is Slurm's own restart, never
acted on a second time; one that fails by itself is requeue-held by Slurm ("holding expedited requeue ... as no
epilogs failed") and must not stay held."""

import subprocess

import pytest

from app.infra.context import AppContext
from tests.e2e.harness import (
    advice_done,
    advice_list,
    attempt_running,
    attempts,
    batch_script,
    eventually,
    lab_context,
    milestones,
    policy_comment,
    running_worker,
    unique_environment,
)
from tests.plugins.slurm_lab import SlurmLab

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.slurm_versions]

EXPEDITE = ["--requeue=expedite"]
# Attempt 0 runs until its node fails; the retry says where it ran and ends.
UNTIL_NODE_FAILS = """\
if [ -z "$SLURM_RESTART_COUNT" ]; then echo "attempt 0 on $SLURMD_NODENAME"; sleep 300; exit 0; fi
echo "attempt $SLURM_RESTART_COUNT on $SLURMD_NODENAME"
"""
# Attempt 0 fails on its own (exit 1, no node failure); the retry ends.
FAILS_BY_ITSELF = """\
if [ -z "$SLURM_RESTART_COUNT" ]; then echo "attempt 0 on $SLURMD_NODENAME"; sleep 1; exit 1; fi
echo "attempt $SLURM_RESTART_COUNT on $SLURMD_NODENAME"
"""


async def story(ctx: AppContext, job_id: int) -> str:
    """What the worker recorded of the job, for assertion messages."""
    rows = [
        f"attempt {a.attempt_index} {a.state} exit {a.exit_code} held {a.held}" for a in await attempts(ctx, job_id)
    ]
    rows += [
        f"advice attempt {a.attempt_index} {a.operation} {a.disposition} {a.disposition_reason}: "
        f"{a.reason} / {a.disposition_message}"
        for a in await advice_list(ctx, job_id)
    ]
    rows += [f"{m.step} {m.status} {m.command}" for m in await milestones(ctx, job_id)]
    return "; ".join(rows)


def needs_expedite(lab: SlurmLab) -> None:
    if lab.release != "26.05":
        pytest.skip(
            f"expedited requeue (--requeue=expedite, SlurmctldParameters=enable_expedited_requeue) exists from "
            f"Slurm 25.11; this lab runs {lab.release}"
        )


def scontrol(lab: SlurmLab, *args: str, check: bool = True) -> None:
    subprocess.run(
        [str(lab.bin_dir / "scontrol"), *args], env=lab.env(), capture_output=True, text=True, timeout=30, check=check
    )


async def test_slurms_expedited_requeue_on_a_node_failure_is_never_acted_on_twice(
    ctx: AppContext, slurm_lab: SlurmLab
) -> None:
    needs_expedite(slurm_lab)
    env = unique_environment()
    wctx = lab_context(ctx, env)
    async with running_worker(wctx, slurm_lab):
        job_id = slurm_lab.submit(batch_script(policy_comment(env), UNTIL_NODE_FAILS), sbatch_args=EXPEDITE)
        assert slurm_lab.scontrol_show(job_id).get("ExpeditedRequeue") == "Yes"
        a0 = await eventually(lambda: attempt_running(wctx, job_id, 0), what="attempt 0 running")
        node = a0.nodes[0]
        try:
            # the node fails under the job: Slurm requeues it at once by itself (no requeue_delay, top priority)
            scontrol(slurm_lab, "update", f"NodeName={node}", "State=DOWN", "Reason=e2e-expedited-requeue")
            try:
                advice = await eventually(lambda: advice_done(wctx, job_id, 0), what="attempt 0's Advice closed")
            except AssertionError as exc:
                raise AssertionError(f"{exc}: {await story(wctx, job_id)}") from None
        finally:
            # (ReturnToService=2: the node's slurmd registers again and it is back by itself, unless still DOWN)
            scontrol(slurm_lab, "update", f"NodeName={node}", "State=RESUME", check=False)

        async def retry_completed():
            found = await attempts(wctx, job_id)
            return len(found) == 2 and found[1].state == "COMPLETED" and found

        await eventually(retry_completed, timeout=180, what="Slurm's own retry completed")
        every = await advice_list(wctx, job_id)
        told = await story(wctx, job_id)
    # Slurm's restart was recognised as the retry: the Advice closed as already satisfied, without a command of
    # ours, and no Advice acted on the retry Slurm started
    assert (advice.operation, advice.disposition, advice.disposition_reason) == (
        "RESTART",
        "CONVERGED",
        "ALREADY_SATISFIED",
    ), told
    # No requeue, hold, release or cancel of ours. Excluding the failed node from Slurm's own retry is the Advice's
    # (update_exclusions, sent only while that retry is still PENDING: whether it is depends on timing)
    sent = await milestones(wctx, job_id)
    assert all(m.step == "update_exclusions" for m in sent), told
    assert all(m.status == "SUCCEEDED" and f"ExcNodeList={node}" in (m.command or "") for m in sent), told
    assert [a.attempt_index for a in every] == [0], told
    assert slurm_lab.scontrol_show(job_id)["Restarts"] == "1"
    assert "DUE TO NODE FAILURE" in (slurm_lab.test_dir() / f"out-{job_id}.log").read_text()


async def test_an_expedited_job_failing_by_itself_is_released_not_left_held(
    ctx: AppContext, slurm_lab: SlurmLab
) -> None:
    needs_expedite(slurm_lab)
    env = unique_environment()
    wctx = lab_context(ctx, env)
    async with running_worker(wctx, slurm_lab):
        job_id = slurm_lab.submit(batch_script(policy_comment(env), FAILS_BY_ITSELF), sbatch_args=EXPEDITE)
        try:
            advice = await eventually(lambda: advice_done(wctx, job_id, 0), what="attempt 0's Advice converged")
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {await story(wctx, job_id)}") from None

        async def retry_completed():
            found = await attempts(wctx, job_id)
            return len(found) == 2 and found[1].state == "COMPLETED" and found

        a0, _ = await eventually(retry_completed, timeout=180, what="the released retry completed")
    # Slurm requeue-held the failed attempt itself (expedited requeue without a node failure): we released it
    assert (a0.state, a0.exit_code) == ("FAILED", 1)
    assert (advice.operation, advice.disposition, advice.disposition_reason) == (
        "RESTART",
        "CONVERGED",
        "DESIRED_STATE_OBSERVED",
    )
    assert [(m.step, m.status) for m in await milestones(wctx, job_id)] == [("release", "SUCCEEDED")]
    assert slurm_lab.scontrol_show(job_id)["Restarts"] == "1"
