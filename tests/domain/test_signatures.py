"""Classification of single lines: crash categories, benign look-alikes, checkpoints, progress, throughput."""

import pytest

from app.domain.detection.rules_builtin import DEFAULT_RULES, default_ruleset
from app.domain.detection.signatures import (
    PRETRAINING,
    TRAININGLOOP,
    CheckpointEvent,
    Classifier,
    CrashSignature,
    ProgressMarker,
    ThroughputSample,
    exception_line_index,
    literal_alternatives,
)

C = Classifier(default_ruleset())

CRASHES = [
    ("Rank0: (1) segmentation fault: artificial segfault", "SEGFAULT", (), 0, None),
    (
        "/var/spool/slurmd/job01/slurm_script: line 9: 4242 Segmentation fault      (core dumped) python train.py",
        "SEGFAULT",
        (),
        None,
        None,
    ),
    ("Fatal Python error: Segmentation fault", "SEGFAULT", (), None, None),
    ("  exitcode  : -11 (pid: 4242)", "SEGFAULT", (), None, None),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "CUDA_ERROR", (), None, None),
    ("[rank5]: RuntimeError: CUDA error: device-side assert triggered", "CUDA_ERROR", (), 5, None),
    ("RuntimeError: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx`", "CUDA_ERROR", (), None, None),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", "CUDA_OOM", (), None, None),
    ("RuntimeError: CUDA error: out of memory", "CUDA_OOM", (), None, None),
    (
        "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=123.0. Some of your processes may have been killed",
        "HOST_OOM",
        (),
        None,
        None,
    ),
    ("[12345.678] Out of memory: Killed process 4242 (python) total-vm:123kB", "HOST_OOM", (), None, None),
    ("Killed process 4242 (python) total-vm:1234kB, anon-rss:99kB", "HOST_OOM", (), None, None),
    ("MemoryError", "HOST_OOM", (), None, None),
    (
        "node7:12345:12399 [3] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
        "10.0.0.8<52914> with error 12",
        "NCCL_ERROR",
        ("node7",),
        None,
        None,
    ),
    (
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled "
        "system error, NCCL version 2.20.5 [node9]",
        "NCCL_ERROR",
        ("node9",),
        None,
        None,
    ),
    (
        "ncclInternalError: Internal check failed. Last error: peer node7:1234 closed",
        "NCCL_ERROR",
        ("node7",),
        None,
        None,
    ),
    (
        "[rank3]:[E1130 02:34:15.123 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=81) ran for 600023 milliseconds before timing out.",
        "NCCL_TIMEOUT",
        (),
        3,
        None,
    ),
    (
        "Nov 30 02:34:15 node12 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=12345, name=python, GPU "
        "has fallen off the bus.",
        "XID",
        ("node12",),
        None,
        79,
    ),
    ("[ 1234.5678] NVRM: Xid (PCI:0000:18:00): 48, pid=1, An uncorrectable double bit error", "XID", (), None, 48),
    (
        "slurmstepd: error: *** JOB 123 ON node3 CANCELLED AT 2026-11-30T02:34:15 DUE TO NODE FAILURE ***",
        "NODE_FAIL",
        ("node3",),
        None,
        None,
    ),
    ("srun: error: Node failure on gpu-a17", "NODE_FAIL", ("gpu-a17",), None, None),
    (
        "slurmstepd: error: *** STEP 123.0 ON node3 CANCELLED AT 2026-11-30T02:34:15 DUE TO TIME LIMIT ***",
        "TIME_LIMIT",
        (),
        None,
        None,
    ),
    ("ValueError: loss is NaN at iteration 1200", "NAN_LOSS", (), None, None),
    ("Detected NaN in gradients, stopping", "NAN_LOSS", (), None, None),
    ("step 1200: nan loss encountered", "NAN_LOSS", (), None, None),
    (" iteration     1200/  500000 | lm loss: nan | number of nan iterations:   1 |", "NAN_LOSS", (), None, None),
    ("Traceback (most recent call last):", "PYTHON_TRACEBACK", (), None, None),
    (
        "ERROR: Failed to save checkpoint at iteration 500: permission denied",
        "CHECKPOINT_WRITE_FAILURE",
        (),
        None,
        None,
    ),
    ("OSError: [Errno 28] No space left on device: '/ckpt/iter_0000500'", "FILESYSTEM", (), None, None),
    ("OSError: [Errno 122] Disk quota exceeded", "FILESYSTEM", (), None, None),
]


@pytest.mark.parametrize("line,category,nodes,rank,xid", CRASHES)
def test_crash_lines_are_classified(line, category, nodes, rank, xid):
    found = C.crash(line)
    assert isinstance(found, CrashSignature), line
    assert (found.category, found.nodes, found.xid) == (category, nodes, xid)
    if rank is not None:
        assert found.rank == rank


BENIGN = [
    "node7:12345:12345 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.7<0>",
    "node7:12345:12345 [0] NCCL INFO NCCL error handling: async",
    "node7:12345:12345 [0] NCCL WARN NET/Plugin: Failed to find ncclNetPlugin_v8 symbol.",
    "/usr/lib/python3/torch/cuda/__init__.py:88: UserWarning: CUDA error handling is deprecated (error_handling)",
    "[rank0]:[W1130 02:34:15.123456 ProcessGroupNCCL.cpp:4115] Warning: NCCL error handling is enabled",
    "checked 1024 files: 0 errors",
    "dataloader stats: errors=0 retries=0",
    "NCCL WARN Connection closed by peer, retrying (1/5)... succeeded",
    "CUDA error: transient ECC event recovered",
    " iteration      100/  500000 | lm loss: 2.345678E+00 | number of skipped iterations:   0 | "
    "number of nan iterations:   0 |",
    "{'loss': 1.2345, 'grad_norm': 0.5, 'learning_rate': 4.9e-05, 'epoch': 0.5}",
    "nan_to_num applied to embeddings",
    "training started",
    "Saving model checkpoint to /out/checkpoint-500",
    "torch.backends.cuda.matmul.allow_tf32 = True; no OutOfMemory here",
]


@pytest.mark.parametrize("line", BENIGN)
def test_benign_look_alikes_are_not_crashes(line):
    assert C.crash(line) is None


def test_literal_alternatives_are_read_only_from_plain_literal_patterns():
    assert literal_alternatives(r"Warning: |warnings\.warn\(") == ("Warning: ", "warnings.warn(")
    assert literal_alternatives(r"a\|b") == ("a|b",)
    for pattern in (r"\bNCCL INFO\b", "a.b", "(?i)x", "x\\", r"\d+", "[W"):
        assert literal_alternatives(pattern) is None


@pytest.mark.parametrize(
    "line,kind,framework,iteration,path",
    [
        (
            "  successfully saved checkpoint from iteration     500 to /ckpt [ t 1/1, p 1/1 ]",
            "saved",
            "megatron",
            500,
            "/ckpt",
        ),
        (" loading checkpoint from /ckpt at iteration 500", "loaded", "megatron", 500, "/ckpt"),
        (
            "  successfully loaded checkpoint from /ckpt [ t 1/1, p 1/1 ] at iteration 500",
            "loaded",
            "megatron",
            500,
            "/ckpt",
        ),
        (
            "Async checkpoint save for step 700 (/res/step=700.ckpt) finalized successfully.",
            "saved",
            "nemo",
            700,
            "/res/step=700.ckpt",
        ),
        ("[Torch] Checkpoint global_step500 is ready now!", "saved", "deepspeed", 500, None),
        (
            "[INFO] [engine.py:3587:_save_checkpoint] Saving model checkpoint: "
            "/p/global_step500/mp_rank_00_model_states.pt",
            "saved",
            "deepspeed",
            500,
            "/p/global_step500/mp_rank_00_model_states.pt",
        ),
        (
            "[Torch] Loading checkpoint from /p/global_step500/mp_rank_00_model_states.pt...",
            "loaded",
            "deepspeed",
            500,
            "/p/global_step500/mp_rank_00_model_states.pt",
        ),
        (
            "Epoch 3, global step 1200: 'val_loss' reached 0.28 (best 0.28), saving model to "
            "'/p/epoch=3-step=1200.ckpt' as top 1",
            "saved",
            "lightning",
            1200,
            "/p/epoch=3-step=1200.ckpt",
        ),
        (
            "Restoring states from the checkpoint path at /p/epoch=3-step=1200.ckpt",
            "loaded",
            "lightning",
            1200,
            "/p/epoch=3-step=1200.ckpt",
        ),
        ("Saving model checkpoint to /out/checkpoint-500", "saved", "hf_trainer", 500, "/out/checkpoint-500"),
        ("Loading model from /out/checkpoint-500.", "loaded", "hf_trainer", 500, "/out/checkpoint-500"),
        (
            "[rank0]:2026-01-01 00:00:00,000 - root - INFO - Finished saving the checkpoint (or "
            "staging if async is enabled)in 1.23 seconds.",
            "saved",
            "torchtitan",
            None,
            None,
        ),
        (
            "[rank0]:2026-01-01 00:00:00,000 - root - INFO - Loading the checkpoint at step 100.",
            "loaded",
            "torchtitan",
            100,
            None,
        ),
        ("saved checkpoint to /ckpt/model.pt at step 1200", "saved", "pytorch", 1200, "/ckpt/model.pt"),
        ("Checkpoint saved: /ckpt/step_300.pt", "saved", "pytorch", 300, "/ckpt/step_300.pt"),
        ("Resuming from checkpoint /ckpt/model.pt (step 1200)", "loaded", "pytorch", 1200, "/ckpt/model.pt"),
    ],
)
def test_checkpoint_lines(line, kind, framework, iteration, path):
    found = C.checkpoint(line)
    assert isinstance(found, CheckpointEvent), line
    assert (found.kind, found.framework, found.iteration, found.path) == (kind, framework, iteration, path)


def test_checkpoint_failure_is_a_crash_not_a_checkpoint():
    line = "Failed to save checkpoint to /ckpt/iter_0000500: No space left on device"
    assert isinstance(C.classify(line), CrashSignature)


@pytest.mark.parametrize(
    "line,phase,iteration",
    [
        ("training ...", PRETRAINING, None),
        ("[before the start of training step] datetime: 2026-11-30 02:34:15", PRETRAINING, None),
        ("***** Running training *****", PRETRAINING, None),
        ("Epoch 0:   0%|          | 0/1000 [00:00<?, ?it/s]", PRETRAINING, None),
        ("[rank0]:2026-01-01 00:00:00,000 - root - INFO - Training starts at step 1.", PRETRAINING, 1),
        (
            " [2026-11-30 02:34:15] iteration      100/  500000 | consumed samples: 12800 | elapsed "
            "time per iteration (ms): 1234.5 | lm loss: 2.3E+00 |",
            TRAININGLOOP,
            100,
        ),
        ("{'loss': 1.23, 'learning_rate': 4.9e-05, 'epoch': 0.5}", TRAININGLOOP, None),
        ("Epoch 1:  45%|████▌     | 450/1000 [01:23<01:40,  5.41it/s, v_num=0]", TRAININGLOOP, 450),
        ("Epoch 0: :  45%|████▌     | 450/1000 [01:23<01:40, reduced_train_loss=2.3]", TRAININGLOOP, 450),
        (
            "[rank0]:2026-01-01 00:00:00,000 - root - INFO - step:  10  loss:  7.9123  memory: "
            "30.12GiB(38.06%)  tps: 1,234  mfu: 22.82%",
            TRAININGLOOP,
            10,
        ),
        ("steps: 100 loss: 2.3456 iter time (s): 0.512 samples/sec: 250.1", TRAININGLOOP, 100),
        ("[Rank 0] step=100, skipped=0, lr=[0.0003], mom=[(0.9, 0.95)]", TRAININGLOOP, 100),
    ],
)
def test_progress_markers(line, phase, iteration):
    found = C.progress(line)
    assert isinstance(found, ProgressMarker), line
    assert (found.phase, found.iteration) == (phase, iteration)


@pytest.mark.parametrize(
    "line",
    [
        "training started",
        "Training started!",
        "starting training loop",
        "model training ... configuration",
        "Epoch 0: validation done",
        "heartbeat: alive",
    ],
)
def test_generic_lines_do_not_arm(line):
    assert C.progress(line) is None


@pytest.mark.parametrize(
    "line,expected",
    [
        (
            "| elapsed time per iteration (ms): 1234.5 | throughput per GPU (TFLOP/s/GPU): 412.3 |",
            {"iter_ms": 1234.5, "tflops_per_gpu": 412.3},
        ),
        ("| TFLOPs: 123.4 | samples per second: 103.7 |", {"tflops": 123.4, "samples_per_s": 103.7}),
        (
            "step: 10  loss:  7.9  memory: 30.1GiB(38.06%)  tps: 1,234  tflops: 71.21  mfu: 22.82%",
            {"tokens_per_s": 1234.0, "tflops": 71.21, "mfu_pct": 22.82},
        ),
        ("steps: 100 loss: 2.3456 iter time (s): 0.512 samples/sec: 250.1", {"iter_ms": 512.0, "samples_per_s": 250.1}),
        ("Epoch 1:  45%|████▌     | 450/1000 [01:23<01:40,  5.41it/s]", {"it_per_s": 5.41}),
    ],
)
def test_throughput_figures(line, expected):
    found = C.throughput(line)
    assert isinstance(found, ThroughputSample)
    assert found.values == pytest.approx(expected)


def test_loss_printed_as_number_is_neither_crash_nor_throughput():
    line = "{'loss': 1.2345, 'grad_norm': 0.5, 'epoch': 0.5}"
    assert C.crash(line) is None and C.throughput(line) is None


def test_traceback_category_comes_from_the_exception_line():
    assert C.traceback_category("torch.OutOfMemoryError: CUDA out of memory.").category == "CUDA_OOM"
    assert C.traceback_category("KeyError: 'input_ids'").category == "PYTHON_TRACEBACK"


def test_exception_line_index_follows_its_own_rank():
    body = [
        '[rank1]:  File "train.py", line 3, in <module>',
        '[rank0]:  File "train.py", line 3, in <module>',
        "[rank0]:ValueError: rank zero failed",
        "[rank1]:    step()",
        "[rank1]:RuntimeError: CUDA error: misaligned address",
    ]
    assert exception_line_index(body, prefix="[rank1]:") == 4
    assert exception_line_index(body, prefix="[rank0]:") == 2
    assert exception_line_index(body[:1], prefix="[rank1]:") is None


def test_every_default_has_an_example_that_it_matches():
    for rule in DEFAULT_RULES:
        assert rule.example, rule.name
        assert any(anchor in rule.example for anchor in rule.anchors), rule.name
        assert rule.compiled().search(rule.example), rule.name


def test_classifier_survives_arbitrary_text():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=300, deadline=None)
    @given(st.text())
    def check(text):
        C.classify(text)
        C.crash(text)

    check()
