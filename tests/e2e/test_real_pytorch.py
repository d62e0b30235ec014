"""Real PyTorch jobs on the real Slurm lab, judged by the real service and read back through the API.

The jobs are the examples job authors copy (examples/ddp.sbatch + ddp_train.py: torchrun, DistributedDataParallel
over gloo on CPU, 2 nodes x 1 torchrun; examples/hf.sbatch + hf_train.py: a Hugging Face Trainer), submitted with
the user guide's directives (`--requeue`, the APS policy in act mode), on a lab of their own (`slurm_framework_lab`,
its own xdist group: minutes of training do not hold up the shared lab's tests) whose nodes have host names of
their own, as on a real cluster. Every line the service reads is what torch,
torchrun, gloo, srun, tqdm and transformers print. The assertions are issue 24's: the root cause is the process
that failed first (its node, not a survivor's `Connection reset by peer`), the story cites the evidence the
Advice was decided on, the hang detector arms on the program's own progress lines (the hang is found before the
collective timeout), a checkpoint load is recorded once per retry, a repeated failure is recognised as the same,
NaN is detected, and a clean run has no anomaly.

Each test gathers all its checks and fails listing every one that did not hold (so one run shows them all).
The jobs' interpreter is the virtual environment `.ci/bootstrap` installs torch, transformers and accelerate into
(RECOVERY_TORCH_VENV, default /var/cache/recovery-lab/torch-venv); without it these tests fail under CI and skip
elsewhere, saying so. RECOVERY_TEST_CAPTURES_DIR, when set, receives each job's output file.
"""

from __future__ import annotations

import re

import pytest

from app.infra.context import AppContext
from tests.e2e.pytorch_jobs import (
    HANG_PG_TIMEOUT_SECONDS,
    HANG_QUERY_DELAY_SECONDS,
    PRETRAINING_SECONDS,
    TRAININGLOOP_SECONDS,
    Checks,
    check_cites_the_decided_anomaly,
    check_consequences_marked,
    check_node_provenance,
    check_resumed,
    check_story_cites_the_decision,
    fault_node,
    run_job,
)
from tests.e2e.pytorch_jobs import torch_python as torch_python  # the fixture, for this module's tests
from tests.plugins.slurm_lab import SlurmLab

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.real_framework]

# ---------------------------------------------------------------- torchrun + DDP over gloo


# Both databases: "the same failure" compares fingerprints stored as JSON across attempts, and the story's cited
# anomaly is read back through each one's queries.
@pytest.mark.parametrize("database", ["sqlite", "postgres"], indirect=True)
async def test_ddp_exception_on_one_rank_repeated_is_recognised_as_the_same(
    ctx: AppContext, slurm_framework_lab: SlurmLab, torch_python: str
) -> None:
    """The process on the second node gets a batch of the wrong shape at step 7 on every attempt."""
    run = await run_job(
        ctx,
        slurm_framework_lab,
        torch_python,
        example="ddp.sbatch",
        train_args="--fault raise --fault-step 7 --fault-attempts all",
        attempts=2,
        max_requeue_times=2,
    )
    checks = Checks(f"ddp raise x2 (job {run.job_id}, {run.seconds:.0f} s)")
    origin = r"mat1 and mat2 shapes cannot be multiplied"
    checks.expect(re.search(origin, run.output), "the job printed torch's own error", run.output[-300:])
    checks.expect(len(run.attempts) == 2, "exactly two attempts (the repeat stopped it)", len(run.attempts))
    first, second = (run.attempts + [{}, {}])[:2]
    checks.expect((first.get("advice") or {}).get("operation") == "RESTART", "attempt 0: RESTART", first.get("advice"))
    for index in range(min(2, len(run.attempts))):
        root = check_story_cites_the_decision(checks, run, index, origin)
        if root is not None:
            checks.expect(root["category"] == "PYTHON_TRACEBACK", f"attempt {index}'s root cause category", root)
            checks.expect(
                root["node"] == fault_node(run, index),
                f"attempt {index}'s root cause is on the failing process's node {fault_node(run, index)}",
                root["node"],
            )
            check_node_provenance(checks, run, index, root)
            checks.expect(
                (root["details"] or {}).get("fingerprint"), f"attempt {index}'s root cause has a fingerprint", root
            )
        check_consequences_marked(checks, run, index, root)
    advice = second.get("advice") or {}
    checks.expect(
        (advice.get("operation"), advice.get("rule")) == ("TERMINATE", "application_failure_repeated"),
        "attempt 1: TERMINATE as the same application failure repeated",
        advice,
    )
    checks.expect(
        "the same application failure as attempt 0" in (advice.get("reason") or ""),
        "the Advice's reason names the repeat",
        advice.get("reason"),
    )
    checks.expect(
        "at iteration 6" in (advice.get("reason") or ""),
        "the reason knows where: the resumed attempt's first step counter past its checkpoint armed it",
        advice.get("reason"),
    )
    roots = [run.cited(i) for i in range(min(2, len(run.attempts)))]
    prints = [(r or {}).get("details", {}).get("fingerprint") for r in roots]
    checks.expect(
        len(prints) == 2 and prints[0] and prints[0] == prints[1], "both root causes share a fingerprint", prints
    )
    loads = run.loads(1) if len(run.attempts) > 1 else []
    checks.expect([c["iteration"] for c in loads] == [5], "attempt 1's load recorded once, at iteration 5", loads)
    checks.verdict()


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)  # the stored evidence is the same on PostgreSQL
async def test_ddp_rank_killed_blames_the_killed_rank_not_the_survivor(
    ctx: AppContext, slurm_framework_lab: SlurmLab, torch_python: str
) -> None:
    """The process on the second node is SIGKILLed at step 7; the survivor's gloo sees its peer vanish."""
    run = await run_job(
        ctx,
        slurm_framework_lab,
        torch_python,
        example="ddp.sbatch",
        train_args="--fault kill --fault-step 7",
        attempts=2,
    )
    checks = Checks(f"ddp kill (job {run.job_id}, {run.seconds:.0f} s)")
    checks.expect(re.search(r"exitcode\s*:\s*-9|Signal 9 \(SIGKILL\)", run.output), "torchrun reported SIGKILL", None)
    advice = run.attempts[0].get("advice") or {}
    checks.expect(advice.get("operation") == "RESTART", "attempt 0: RESTART", advice)
    root = check_story_cites_the_decision(checks, run, 0, r"-9|SIGKILL|[Ss]ignal 9")
    if root is not None:
        checks.expect(
            root["node"] == fault_node(run),
            f"the root cause is on the killed process's node {fault_node(run)}, not the survivor's",
            root["node"],
        )
        check_node_provenance(checks, run, 0, root)
        checks.expect(
            not re.search(r"[Cc]onnection (reset|closed) by peer|Read error", root["line"] or ""),
            "the root cause is not the survivor's peer-connection error",
            root["line"],
        )
    check_consequences_marked(checks, run, 0, root)
    check_resumed(checks, run, 1, 5)
    checks.verdict()


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)  # the stored evidence is the same on PostgreSQL
async def test_ddp_rank_hanging_before_a_collective_is_found_before_the_collective_timeout(
    ctx: AppContext, slurm_framework_lab: SlurmLab, torch_python: str
) -> None:
    """The process on the second node sleeps before the all-reduce of step 7; gloo would time out after 300 s.
    Found at the training-loop threshold plus the query delay after the last line (8 + 5 s), by the detector the
    program's own `iteration N | loss X` lines armed."""
    run = await run_job(
        ctx,
        slurm_framework_lab,
        torch_python,
        example="ddp.sbatch",
        train_args=f"--fault hang --fault-step 7 --pg-timeout {HANG_PG_TIMEOUT_SECONDS}",
        attempts=2,
        hang_query_delay=HANG_QUERY_DELAY_SECONDS,
    )
    checks = Checks(f"ddp hang (job {run.job_id}, {run.seconds:.0f} s)")
    hangs = run.anomalies(0, "NO_PROGRESS")
    checks.expect(hangs, "attempt 0's hang recorded (NO_PROGRESS): the detector armed on `iteration N | loss X`", None)
    if hangs:
        details = hangs[0]["details"] or {}
        silent = details.get("silentSeconds") or 0
        print(f"hang found {silent:.1f} s after the last line (threshold {TRAININGLOOP_SECONDS} s)")
        checks.expect(
            details.get("trainingLoop") and silent < HANG_PG_TIMEOUT_SECONDS / 4,
            f"found in the training loop, well before gloo's {HANG_PG_TIMEOUT_SECONDS} s collective timeout",
            details,
        )
        checks.expect("iteration 6 |" in (hangs[0]["line"] or ""), "the hang cites the last progress line", hangs[0])
    timeouts = re.findall(r".*Timed out waiting.*", run.output.split("loaded checkpoint from", 1)[0])
    checks.expect(not timeouts, "no collective timed out before the retry", timeouts[:1])
    check_cites_the_decided_anomaly(checks, run, 0)
    story = run.attempts[0]["story"] or {}
    checks.expect("hung" in story.get("happened", ""), "attempt 0's story says it hung", story.get("happened"))
    advice = run.attempts[0].get("advice") or {}
    checks.expect(advice.get("operation") == "RESTART", "attempt 0: RESTART", advice)
    checks.expect(
        "before any progress marker" not in (advice.get("reason") or ""),
        "the reason knows the progress the job printed",
        advice.get("reason"),
    )
    check_resumed(checks, run, 1, 5)
    checks.verdict()


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)  # the stored evidence is the same on PostgreSQL
async def test_ddp_gloo_collective_timeout_is_a_transient_collective_timeout(
    ctx: AppContext, slurm_framework_lab: SlurmLab, torch_python: str
) -> None:
    """The process on the second node sleeps before the all-reduce of step 7 and the job's hang threshold is set
    above gloo's 12 s timeout, so gloo's own `Timed out waiting 12000ms` on the survivor ends the run: one category
    with NCCL's watchdog timeout (a collective timed out), a transient outlook, restarted and resumed."""
    run = await run_job(
        ctx,
        slurm_framework_lab,
        torch_python,
        example="ddp.sbatch",
        train_args="--fault hang --fault-step 7 --pg-timeout 12",
        attempts=2,
        trainingloop_seconds=PRETRAINING_SECONDS,
    )
    checks = Checks(f"ddp gloo timeout (job {run.job_id}, {run.seconds:.0f} s)")
    origin = r"Timed out waiting \d+ms"
    checks.expect(re.search(origin, run.output), "gloo printed its own collective timeout", run.output[-300:])
    checks.expect(not run.anomalies(0, "NO_PROGRESS"), "no hang reported (the threshold is above gloo's)", None)
    root = check_story_cites_the_decision(checks, run, 0, origin)
    if root is not None:
        checks.expect(root["category"] == "NCCL_TIMEOUT", "the collective timeout's category", root["category"])
        checks.expect(root["outlook"] == "transient", "a collective timeout is transient", root["outlook"])
    advice = run.attempts[0].get("advice") or {}
    checks.expect(advice.get("operation") == "RESTART", "attempt 0: RESTART", advice)
    checks.expect("outlook transient" in (advice.get("reason") or ""), "the reason says transient", advice)
    check_consequences_marked(checks, run, 0, root)
    check_resumed(checks, run, 1, 5)
    checks.verdict()


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)  # the stored evidence is the same on PostgreSQL
async def test_ddp_data_loader_stall_before_the_first_checkpoint_is_found(
    ctx: AppContext, slurm_framework_lab: SlurmLab, torch_python: str
) -> None:
    """The process on the second node waits at step 3 for a batch its DataLoader worker never delivers; the other
    waits in the all-reduce. Two printed steps arm the detector; there is no checkpoint yet, so the retry starts
    from scratch and completes."""
    run = await run_job(
        ctx,
        slurm_framework_lab,
        torch_python,
        example="ddp.sbatch",
        train_args=f"--fault stall --fault-step 3 --pg-timeout {HANG_PG_TIMEOUT_SECONDS}",
        attempts=2,
        hang_query_delay=HANG_QUERY_DELAY_SECONDS,
    )
    checks = Checks(f"ddp data loader stall (job {run.job_id}, {run.seconds:.0f} s)")
    hangs = run.anomalies(0, "NO_PROGRESS")
    checks.expect(hangs, "attempt 0's hang recorded (NO_PROGRESS) after two printed steps", run.anomalies(0))
    if hangs:
        details = hangs[0]["details"] or {}
        silent = details.get("silentSeconds") or 0
        print(f"stall found {silent:.1f} s after the last line (threshold {TRAININGLOOP_SECONDS} s)")
        checks.expect(details.get("trainingLoop"), "in the training loop's phase", details)
        checks.expect(silent < HANG_PG_TIMEOUT_SECONDS / 4, "well before the collective timeout", silent)
        checks.expect("iteration 2 |" in (hangs[0]["line"] or ""), "the hang cites the last progress line", hangs[0])
    checks.expect(not run.anomalies(0, "CRASH"), "no crash recorded before Recovery acted", run.anomalies(0, "CRASH"))
    story = run.attempts[0]["story"] or {}
    checks.expect("hung" in story.get("happened", ""), "attempt 0's story says it hung", story.get("happened"))
    advice = run.attempts[0].get("advice") or {}
    checks.expect(advice.get("operation") == "RESTART", "attempt 0: RESTART", advice)
    check_cites_the_decided_anomaly(checks, run, 0)
    checks.expect(len(run.attempts) == 2 and run.attempts[1]["state"] == "COMPLETED", "attempt 1 completed", None)
    checks.expect(not run.loads(1), "attempt 1 loaded nothing (no checkpoint was saved)", run.loads(1))
    checks.verdict()


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)  # the stored evidence is the same on PostgreSQL
async def test_ddp_nan_loss_is_detected(ctx: AppContext, slurm_framework_lab: SlurmLab, torch_python: str) -> None:
    """The process on the second node gets NaN input from step 12: the all-reduced loss prints `loss nan`."""
    run = await run_job(
        ctx,
        slurm_framework_lab,
        torch_python,
        example="ddp.sbatch",
        train_args="--fault nan --fault-step 12 --save-every 10 --steps 30",
        attempts=2,
    )
    checks = Checks(f"ddp nan (job {run.job_id}, {run.seconds:.0f} s)")
    checks.expect(re.search(r"iteration 12 \| loss nan", run.output), "the program printed `loss nan`", None)
    nans = [a for a in run.anomalies(0) if a["category"] == "NAN_LOSS"]
    checks.expect(nans, "attempt 0's NaN loss detected (NAN_LOSS)", [a["category"] for a in run.anomalies(0)])
    if nans:
        checks.expect("loss nan" in (nans[-1]["line"] or ""), "on the program's own `loss nan` line", nans[-1]["line"])
    check_story_cites_the_decision(checks, run, 0, r"loss nan")
    checks.verdict()


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)  # the stored evidence is the same on PostgreSQL
async def test_ddp_failure_before_the_first_progress_line(
    ctx: AppContext, slurm_framework_lab: SlurmLab, torch_python: str
) -> None:
    """The process on the second node fails in its very first step: no progress line, no checkpoint; the retry
    starts from scratch (nothing to load) and completes."""
    run = await run_job(
        ctx,
        slurm_framework_lab,
        torch_python,
        example="ddp.sbatch",
        train_args="--fault raise --fault-step 1",
        attempts=2,
    )
    checks = Checks(f"ddp raise at step 1 (job {run.job_id}, {run.seconds:.0f} s)")
    first_file = run.output.split("==> ", 2)[1] if run.output.count("==> ") > 1 else run.output
    checks.expect("iteration 1 |" not in first_file, "attempt 0 printed no progress line", first_file[:300])
    advice = run.attempts[0].get("advice") or {}
    checks.expect(advice.get("operation") == "RESTART", "attempt 0: RESTART", advice)
    root = check_story_cites_the_decision(checks, run, 0, r"mat1 and mat2 shapes cannot be multiplied")
    if root is not None:
        checks.expect(root["category"] == "PYTHON_TRACEBACK", "root cause category", root["category"])
        checks.expect(root["node"] == fault_node(run), f"the root cause is on {fault_node(run)}", root["node"])
        check_node_provenance(checks, run, 0, root)
    check_consequences_marked(checks, run, 0, root)
    checks.expect(not run.anomalies(0, "NO_PROGRESS"), "no hang: nothing armed the detector", run.anomalies(0))
    checks.expect(not run.attempts[0]["checkpoints"]["nodes"], "no checkpoint in attempt 0", run.attempts[0])
    checks.expect(len(run.attempts) == 2 and run.attempts[1]["state"] == "COMPLETED", "attempt 1 completed", None)
    checks.expect(not run.loads(1), "attempt 1 loaded nothing (there was nothing to load)", run.loads(1))
    checks.verdict()


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)  # the stored evidence is the same on PostgreSQL
async def test_ddp_exception_during_checkpoint_save(
    ctx: AppContext, slurm_framework_lab: SlurmLab, torch_python: str
) -> None:
    """At the checkpoint of step 10 the process on the second node's torch.save raises (pickle cannot save its
    state); the other waits at the save's barrier, so iter_10 is never written and the retry resumes from 5."""
    run = await run_job(
        ctx,
        slurm_framework_lab,
        torch_python,
        example="ddp.sbatch",
        train_args="--fault save --fault-step 10 --steps 15",
        attempts=2,
    )
    checks = Checks(f"ddp save fails (job {run.job_id}, {run.seconds:.0f} s)")
    origin = r"PicklingError|Can't pickle"
    checks.expect(re.search(origin, run.output), "torch.save raised pickle's own error", run.output[-300:])
    saves = [c["iteration"] for c in run.attempts[0]["checkpoints"]["nodes"] if c["kind"] == "saved"]
    checks.expect(saves == [5], "attempt 0's save of iteration 5 recorded, none of 10", saves)
    advice = run.attempts[0].get("advice") or {}
    checks.expect(advice.get("operation") == "RESTART", "attempt 0: RESTART", advice)
    root = check_story_cites_the_decision(checks, run, 0, origin)
    if root is not None:
        checks.expect(root["category"] == "PYTHON_TRACEBACK", "root cause category", root["category"])
        checks.expect(root["node"] == fault_node(run), f"the root cause is on {fault_node(run)}", root["node"])
        check_node_provenance(checks, run, 0, root)
    check_consequences_marked(checks, run, 0, root)
    checks.expect(not run.anomalies(0, "NO_PROGRESS"), "no hang reported", run.anomalies(0, "NO_PROGRESS"))
    check_resumed(checks, run, 1, 5)
    checks.verdict()


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)  # the stored evidence is the same on PostgreSQL
async def test_ddp_corrupt_sample_in_a_dataloader_worker_is_the_root_cause(
    ctx: AppContext, slurm_framework_lab: SlurmLab, torch_python: str
) -> None:
    """At step 7 the process on the second node reads its batch through a DataLoader worker whose sample raises;
    torch re-raises it in the rank ("Caught ValueError in DataLoader worker process 0") above the worker's
    original traceback. The root cause is the original exception, not the re-raise; restarted, resumed from 5."""
    run = await run_job(
        ctx, slurm_framework_lab, torch_python, example="ddp.sbatch", train_args="--fault loader", attempts=2
    )
    checks = Checks(f"ddp corrupt sample (job {run.job_id}, {run.seconds:.0f} s)")
    origin = r"sample 2 of .*shard-0004\.tar is corrupt"
    checks.expect(re.search("Caught ValueError in DataLoader worker process", run.output), "torch re-raised it", None)
    advice = run.attempts[0].get("advice") or {}
    checks.expect(advice.get("operation") == "RESTART", "attempt 0: RESTART", advice)
    root = check_story_cites_the_decision(checks, run, 0, origin)
    if root is not None:
        checks.expect(root["category"] == "PYTHON_TRACEBACK", "root cause category", root["category"])
        checks.expect(root["node"] == fault_node(run), f"the root cause is on {fault_node(run)}", root["node"])
    check_consequences_marked(checks, run, 0, root)
    check_resumed(checks, run, 1, 5)
    checks.verdict()


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)  # the stored evidence is the same on PostgreSQL
async def test_ddp_clean_run_completes_without_anomaly(
    ctx: AppContext, slurm_framework_lab: SlurmLab, torch_python: str
) -> None:
    run = await run_job(
        ctx, slurm_framework_lab, torch_python, example="ddp.sbatch", train_args="--fault none", attempts=1
    )
    checks = Checks(f"ddp clean (job {run.job_id}, {run.seconds:.0f} s)")
    checks.expect([a["state"] for a in run.attempts] == ["COMPLETED"], "one attempt, completed", run.attempts)
    checks.expect(not run.anomalies(0), "no anomaly", run.anomalies(0))
    checks.expect(run.attempts[0].get("advice") is None, "no Advice", run.attempts[0].get("advice"))
    saves = [c["iteration"] for c in run.attempts[0]["checkpoints"]["nodes"] if c["kind"] == "saved"]
    checks.expect(sorted(saves) == [5, 10, 15, 20], "the four saves recorded", (saves, run.attempts[0]["stdoutPath"]))
    checks.verdict()


# ---------------------------------------------------------------- Hugging Face Trainer


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)  # the stored evidence is the same on PostgreSQL
async def test_hf_trainer_exception_then_resume_from_checkpoint(
    ctx: AppContext, slurm_framework_lab: SlurmLab, torch_python: str
) -> None:
    """The Trainer fails at step 8 on the first attempt; the retry resumes from checkpoint-5 and completes."""
    run = await run_job(
        ctx,
        slurm_framework_lab,
        torch_python,
        example="hf.sbatch",
        train_args="--fault raise --fault-step 8",
        attempts=2,
    )
    checks = Checks(f"hf raise (job {run.job_id}, {run.seconds:.0f} s)")
    checks.expect("Saving model checkpoint to" in run.output, "the Trainer printed its own save lines", None)
    checks.expect(
        "Resuming training from checkpoint with epoch 0 and global step 5" in run.output,
        "the Trainer resumed by itself from checkpoint-5",
        None,
    )
    saves = [c["iteration"] for c in run.attempts[0]["checkpoints"]["nodes"] if c["kind"] == "saved"]
    checks.expect(saves == [5], "attempt 0's save of checkpoint-5 recorded", saves)
    hangs = run.anomalies(0, "NO_PROGRESS")
    checks.expect(not hangs, "no hang reported for a job that printed tqdm progress", hangs)
    advice = run.attempts[0].get("advice") or {}
    checks.expect(advice.get("operation") == "RESTART", "attempt 0: RESTART", advice)
    root = check_story_cites_the_decision(checks, run, 0, r"ValueError: corrupt sample")
    if root is not None:
        checks.expect(root["category"] == "PYTHON_TRACEBACK", "root cause category", root["category"])
    check_resumed(checks, run, 1, 5)
    checks.expect(
        not [a for a in run.anomalies(1) if a["kind"] == "CRASH"], "the resumed attempt has no crash", run.anomalies(1)
    )
    checks.verdict()


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)  # the stored evidence is the same on PostgreSQL
async def test_hf_trainer_nan_loss_is_detected(
    ctx: AppContext, slurm_framework_lab: SlurmLab, torch_python: str
) -> None:
    """The weights turn to NaN before step 6: the Trainer logs `'grad_norm': 'nan'` itself (its default
    logging_nan_inf_filter hides the loss: `'loss': '0'`)."""
    run = await run_job(
        ctx,
        slurm_framework_lab,
        torch_python,
        example="hf.sbatch",
        train_args="--fault nan --fault-step 6 --save-steps 20 --steps 30",
        attempts=2,
    )
    checks = Checks(f"hf nan (job {run.job_id}, {run.seconds:.0f} s)")
    checks.expect("'grad_norm': 'nan'" in run.output, "the Trainer logged a nan gradient norm", None)
    nans = [a for a in run.anomalies(0) if a["category"] == "NAN_LOSS"]
    checks.expect(nans, "attempt 0's NaN detected (NAN_LOSS)", [a["category"] for a in run.anomalies(0)])
    if nans:
        checks.expect("'grad_norm': 'nan'" in (nans[-1]["line"] or ""), "on the Trainer's own line", nans[-1]["line"])
    checks.verdict()
