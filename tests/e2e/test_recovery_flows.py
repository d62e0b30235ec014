"""End to end on the real Slurm lab: observer -> advisor -> controller carry out the user guide's recovery flows."""

import asyncio
import uuid

import pytest
from sqlalchemy import func, select

from app.advice.models import SchedulerAction
from app.audit.models import AuditEvent
from app.domain.fleetwide.goodput import BUCKETS
from app.goodput import queries as goodput_queries
from app.infra.context import AppContext
from app.jobs import queries as job_queries
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
from tests.factories import add_anomaly
from tests.plugins.slurm_lab import SlurmLab

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

# Attempt 0 writes a checkpoint and fails; a retry (SLURM_RESTART_COUNT set) must find it.
CHECKPOINT_BODY = """\
if [ -z "$SLURM_RESTART_COUNT" ]; then
  echo "iteration 100" > "ckpt-$SLURM_JOB_ID"
  echo "saved checkpoint ckpt-$SLURM_JOB_ID at iteration 100"
  sleep 1
  exit 1
fi
echo "attempt $SLURM_RESTART_COUNT on $SLURMD_NODENAME resumed from $(cat "ckpt-$SLURM_JOB_ID")"
"""
# Runs until something ends it; a retry finishes at once and says where it ran.
LONG_FIRST_ATTEMPT = """\
if [ -z "$SLURM_RESTART_COUNT" ]; then echo "attempt 0 on $SLURMD_NODENAME"; sleep 120; exit 0; fi
echo "attempt $SLURM_RESTART_COUNT on $SLURMD_NODENAME"
"""


@pytest.mark.slurm_versions
async def test_failed_job_with_checkpoint_is_requeued_and_resumes(ctx: AppContext, slurm_lab: SlurmLab) -> None:
    env = unique_environment()
    wctx = lab_context(ctx, env)
    async with running_worker(wctx, slurm_lab):
        job_id = slurm_lab.submit(batch_script(policy_comment(env), CHECKPOINT_BODY))
        advice = await eventually(lambda: advice_done(wctx, job_id, 0), what="attempt 0's Advice converged")
        assert (advice.operation, advice.disposition, advice.disposition_reason) == (
            "RESTART",
            "CONVERGED",
            "DESIRED_STATE_OBSERVED",
        )

        async def second_completed():
            found = await attempts(wctx, job_id)
            return len(found) == 2 and found[1].state == "COMPLETED" and found

        a0, a1 = await eventually(second_completed, timeout=180, what="attempt 1 completed")
    assert (a0.state, a0.exit_code) == ("FAILED", 1)
    output = (slurm_lab.test_dir() / f"out-{job_id}.log").read_text()
    assert "attempt 1 on node" in output and "resumed from iteration 100" in output
    assert slurm_lab.scontrol_show(job_id)["Restarts"] == "1"
    assert [(m.step, m.status) for m in await milestones(wctx, job_id)] == [
        ("requeue_hold", "SUCCEEDED"),
        ("release", "SUCCEEDED"),
    ]


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)  # the logic runs on both in tests/worker
async def test_singleton_dependency_releases_the_held_twin_with_the_exclusions(
    ctx: AppContext, slurm_lab: SlurmLab
) -> None:
    env = unique_environment()
    wctx = lab_context(ctx, env)
    comment = policy_comment(env).replace('"auto_resume_mode":"requeue"', '"auto_resume_mode":"singleton_dependency"')
    name = f"twin-{uuid.uuid4().hex[:6]}"
    singleton = ["--dependency=singleton"]
    async with running_worker(wctx, slurm_lab):
        first = slurm_lab.submit(batch_script(comment, LONG_FIRST_ATTEMPT, name=name), sbatch_args=singleton)
        twin = slurm_lab.submit(
            batch_script(comment, 'echo "twin on $SLURMD_NODENAME"', name=name), sbatch_args=[*singleton, "--hold"]
        )
        a0 = await eventually(lambda: attempt_running(wctx, first, 0), what="the first job running")
        bad = a0.nodes[0]
        await add_anomaly(wctx, first, kind="CRASH", node=bad, category="xid", key=f"xid-{uuid.uuid4().hex}")
        advice = await eventually(lambda: advice_done(wctx, first, 0), what="Advice converged")

        async def twin_completed():
            found = await attempts(wctx, twin)
            return found and found[0].state == "COMPLETED" and found[0]

        ran = await eventually(twin_completed, timeout=180, what="the twin completed")
    assert (advice.operation, advice.rule, advice.successor_job_id) == ("RESTART", "release_singleton_twin", twin)
    assert advice.disposition_reason == "DESIRED_STATE_OBSERVED" and advice.exclusions == [bad]
    assert "held twin" in advice.reason and "retry 1 of retry limit 1" in advice.reason
    assert [(m.step, m.command) for m in await milestones(wctx, first)] == [
        ("cancel", f"scancel {first}"),
        ("update_exclusions", f"scontrol update JobId={twin} ExcNodeList={bad}"),
        ("release", f"scontrol release {twin}"),
    ]
    assert bad not in ran.nodes
    assert slurm_lab.scontrol_show(first)["Restarts"] == "0"  # the retry ran as the twin, not as a requeue
    assert slurm_lab.scontrol_show(twin)["ExcNodeList"] == bad


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)  # the logic runs on both in tests/worker
async def test_checkpoint_deleted_after_its_save_line_is_no_loadable_checkpoint(
    ctx: AppContext, slurm_lab: SlurmLab
) -> None:
    env = unique_environment()
    directory = slurm_lab.test_dir()
    # early stop after 1: a loadable new checkpoint would allow the retry; a missing one stops it
    wctx = lab_context(
        ctx,
        env,
        checkpoint_check_partitions=("*",),
        checkpoint_check_roots=(str(directory),),
        early_stop_failures=1,
    )
    body = """\
CKPT="$PWD/run-$SLURM_JOB_ID/checkpoint-100"
mkdir -p "$CKPT"
echo '{"global_step": 100}' > "$CKPT/trainer_state.json"
head -c 4096 /dev/zero > "$CKPT/model.safetensors"
echo "Saving model checkpoint to $CKPT"
sleep 5
rm -rf "$PWD/run-$SLURM_JOB_ID"
exit 1
"""
    async with running_worker(wctx, slurm_lab):
        job_id = slurm_lab.submit(batch_script(policy_comment(env), body))
        advice = await eventually(lambda: advice_done(wctx, job_id, 0), what="attempt 0's Advice settled")
    check = advice.checkpoint_check or {}
    assert check["status"] == "MISSING" and check["message"].startswith("no loadable checkpoint")
    assert check["path"] == f"{directory}/run-{job_id}/checkpoint-100" and check["framework"] == "hf_trainer"
    assert (advice.operation, advice.rule) == ("TERMINATE", "early_stop_no_checkpoint")
    async with wctx.sessions() as session:
        events = (
            await session.scalars(
                select(AuditEvent).where(
                    AuditEvent.slurm_job_id == job_id, AuditEvent.event_type == "checkpoint.checked"
                )
            )
        ).all()
    assert [(e.level, e.attempt_index, e.payload["status"]) for e in events] == [("WARNING", 0, "MISSING")]


# Timestamped lines (one file for both attempts: source time tells them apart).
GOODPUT_BODY = """\
log() { echo "$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ) $*"; }
if [ -z "$SLURM_RESTART_COUNT" ]; then
  sleep 1
  log " iteration       10/     100 | lm loss: 2.0 |"
  sleep 1
  head -c 1024 /dev/zero > "ckpt-$SLURM_JOB_ID.pt"
  log "saved checkpoint to $PWD/ckpt-$SLURM_JOB_ID.pt at step 10"
  sleep 2
  log "Rank0: (1) segmentation fault: artificial segfault"
  exit 1
fi
sleep 1
log " iteration       20/     100 | lm loss: 1.0 |"
sleep 1
"""


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)  # the logic runs on both in tests/worker
async def test_goodput_of_a_recovered_run_adds_up_to_its_wall_time(ctx: AppContext, slurm_lab: SlurmLab) -> None:
    env = unique_environment()
    wctx = lab_context(ctx, env)
    async with running_worker(wctx, slurm_lab):
        # both attempts append to one file: their lines are told apart by time (the progress line of each)
        shared = policy_comment(env).replace(
            '"max_requeue_times"', '"log_file_paths_shared_across_attempts":true,"max_requeue_times"'
        )
        job_id = slurm_lab.submit(batch_script(shared, GOODPUT_BODY))

        async def second_completed():
            found = await attempts(wctx, job_id)
            done = len(found) == 2 and found[1].state == "COMPLETED" and found[1].first_progress_at is not None
            return found if done else None

        a0, a1 = await eventually(second_completed, timeout=180, what="attempt 1 completed")
        async with wctx.sessions() as session:
            job = await job_queries.get_job(session, job_id=a0.job_id)
            assert job is not None and job.workflow_id is not None
            report = await goodput_queries.workflow_goodput(session, workflow_id=job.workflow_id)
    (run,) = [found.run for found in report.jobs]
    wall = (a1.end_time - a0.start_time).total_seconds()
    total = run.total
    assert abs(total.wall - wall) < 1e-6 and run.failures == 1
    assert abs(sum(getattr(total, b) for b in BUCKETS) - wall) < 1e-6
    assert abs(sum(part.wall for part in run.attempts.values()) - wall) < 1e-6
    # the retry's restart -> first progress line, and the crashed attempt's work after its checkpoint, are lost
    assert a0.first_progress_at is not None and a1.first_progress_at > a1.start_time
    assert total.restart_to_progress > 0 and total.lost_since_checkpoint > 0 and total.productive > 0
    assert total.detection_delay >= 0 and total.decision_to_release >= 0 and total.queue_wait >= 0
    assert total.effective_percent is not None and 0 < total.effective_percent < 100


async def test_max_requeue_times_one_stops_after_one_retry(ctx: AppContext, slurm_lab: SlurmLab) -> None:
    env = unique_environment()
    wctx = lab_context(ctx, env)
    async with running_worker(wctx, slurm_lab):
        job_id = slurm_lab.submit(batch_script(policy_comment(env, max_requeue_times=1), "sleep 1; exit 1"))
        terminate = await eventually(
            lambda: advice_done(wctx, job_id, 1), timeout=180, what="attempt 1's Advice settled"
        )
        await asyncio.sleep(3)  # room for a wrong extra requeue to show
    assert (terminate.operation, terminate.rule) == ("TERMINATE", "retry_limit")
    assert "retry limit 1 reached (job asked 1" in terminate.reason
    assert (terminate.disposition, terminate.disposition_reason) == ("CONVERGED", "ALREADY_SATISFIED")
    shown = slurm_lab.scontrol_show(job_id)
    assert (shown["Restarts"], shown["JobState"]) == ("1", "FAILED")
    assert [a.state for a in await attempts(wctx, job_id)] == ["FAILED", "FAILED"]


async def test_act_without_the_ceiling_stays_observe_and_touches_nothing(ctx: AppContext, slurm_lab: SlurmLab) -> None:
    env = unique_environment()
    wctx = lab_context(ctx, env, acknowledge_scheduler_actions=False)
    async with running_worker(wctx, slurm_lab):
        job_id = slurm_lab.submit(batch_script(policy_comment(env, mode="act"), "sleep 1; exit 1"))

        async def not_authorized():
            found = await advice_list(wctx, job_id)
            return found and found[0].disposition_reason == "NOT_AUTHORIZED" and found[0]

        advice = await eventually(not_authorized, what="NOT_AUTHORIZED status")
        await asyncio.sleep(2)
    assert advice.mode == "observe" and "ceiling" in advice.mode_reason and advice.disposition == "PENDING"
    assert [(m.step, m.status) for m in await milestones(wctx, job_id)] == [
        ("requeue_hold", "SHADOW"),
        ("release", "SHADOW"),
    ]
    shown = slurm_lab.scontrol_show(job_id)
    assert (shown["Restarts"], shown["JobState"]) == ("0", "FAILED")


@pytest.mark.slurm_versions
async def test_crash_naming_a_node_excludes_it_from_the_retry(ctx: AppContext, slurm_lab: SlurmLab) -> None:
    env = unique_environment()
    wctx = lab_context(ctx, env)
    async with running_worker(wctx, slurm_lab):
        job_id = slurm_lab.submit(batch_script(policy_comment(env), LONG_FIRST_ATTEMPT))
        a0 = await eventually(lambda: attempt_running(wctx, job_id, 0), what="attempt 0 running")
        bad = a0.nodes[0]
        await add_anomaly(
            wctx, job_id, kind="CRASH", node=bad, category="xid", key=f"xid-{uuid.uuid4().hex}"
        )  # as the watcher would
        advice = await eventually(lambda: advice_done(wctx, job_id, 0), what="Advice converged")

        async def second_placed():
            found = await attempts(wctx, job_id)
            # squeue may list a pending requeued job with its old nodes: wait until it really runs somewhere
            return len(found) == 2 and found[1].state in ("RUNNING", "COMPLETED") and found[1].nodes and found[1]

        a1 = await eventually(second_placed, timeout=180, what="attempt 1 placed")
    assert advice.exclusions == [bad] and advice.disposition_reason == "DESIRED_STATE_OBSERVED"
    assert bad not in a1.nodes
    assert slurm_lab.scontrol_show(job_id)["ExcNodeList"] == bad
    assert [m.step for m in await milestones(wctx, job_id)] == ["requeue_hold", "update_exclusions", "release"]


@pytest.mark.slurm_versions
async def test_hung_job_is_ended_by_requeue_hold_and_requeued(ctx: AppContext, slurm_lab: SlurmLab) -> None:
    env = unique_environment()
    wctx = lab_context(ctx, env)
    async with running_worker(wctx, slurm_lab):
        job_id = slurm_lab.submit(batch_script(policy_comment(env), LONG_FIRST_ATTEMPT))
        await eventually(lambda: attempt_running(wctx, job_id, 0), what="attempt 0 running")
        await add_anomaly(wctx, job_id, kind="NO_PROGRESS", category="no_output", key=f"hang-{uuid.uuid4().hex}")
        advice = await eventually(lambda: advice_done(wctx, job_id, 0), what="Advice converged")

        async def second_ran():
            found = await attempts(wctx, job_id)
            return len(found) == 2 and found[1].state in {"RUNNING", "COMPLETED"} and found

        a0, a1 = await eventually(second_ran, timeout=180, what="attempt 1 ran")
    assert advice.operation == "RESTART" and "stopped making progress" in advice.reason
    assert a0.state == "REQUEUED"  # the hung attempt was ended by the requeue-hold, its record kept
    assert slurm_lab.scontrol_show(job_id)["Restarts"] == "1"


async def test_two_workers_started_at_once_never_both_act(ctx: AppContext, slurm_lab: SlurmLab) -> None:
    env = unique_environment()
    wctx = lab_context(ctx, env)
    async with running_worker(wctx, slurm_lab, holder="first"), running_worker(wctx, slurm_lab, holder="second"):
        job_id = slurm_lab.submit(batch_script(policy_comment(env), "sleep 1; exit 1"))
        await eventually(lambda: advice_done(wctx, job_id, 0), what="Advice converged")
        await asyncio.sleep(3)
    rows = await milestones(wctx, job_id)
    assert [(m.step, m.status) for m in rows] == [("requeue_hold", "SUCCEEDED"), ("release", "SUCCEEDED")]
    async with wctx.sessions() as session:
        sent = await session.scalar(
            select(func.count())
            .select_from(AuditEvent)
            .where(AuditEvent.event_type.like("scheduler.%"), AuditEvent.slurm_job_id == job_id)
        )
        keys = await session.scalar(select(func.count(func.distinct(SchedulerAction.idempotency_key))))
    assert sent == 2 and keys == 2
    assert slurm_lab.scontrol_show(job_id)["Restarts"] == "1"
