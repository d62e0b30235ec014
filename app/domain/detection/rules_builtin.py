"""The built-in signatures, markers and benign exclusions (docs/signatures.md lists each with its example).

Anchors are case-sensitive literals: the chunk prefilter looks only for them, so a rule can
only match a line that contains at least one of its anchors. Keep them specific — an anchor
that occurs on every line (like "loss") would make every line a candidate.
"""

from __future__ import annotations

from app.domain.detection.rules_nodes import NODE_RULES
from app.domain.detection.rules_realworld import (
    CHECKPOINT_FAILURE_RULES,
    EXCEPTION_LINE_RULES,
    FILESYSTEM_RULES,
    GPU_RULES,
    LAUNCHER_RULES,
    NAN_RULES,
    REALWORLD_CHECKPOINT_RULES,
    SLURM_RULES,
)
from app.domain.detection.rules_structure import (
    STRUCTURE_CHECKPOINT_RULES,
    STRUCTURE_CRASH_RULES,
    STRUCTURE_NAN_RULES,
)
from app.domain.detection.signatures import (
    CUDA_ERROR,
    CUDA_OOM,
    HOST_OOM,
    NAN_LOSS,
    NCCL_ERROR,
    NCCL_TIMEOUT,
    NODE_FAIL,
    PRETRAINING,
    PYTHON_TRACEBACK,
    SEGFAULT,
    TIME_LIMIT,
    TRACEBACK_START,
    TRAININGLOOP,
    XID,
    Rule,
    RuleSet,
)

_PATH = r"(?P<path>\S+)"


def _crash(name: str, category: str, anchors: tuple[str, ...], pattern: str, example: str, exclude: str = "") -> Rule:
    return Rule(
        name=name, kind="crash", anchors=anchors, pattern=pattern, label=category, exclude=exclude, example=example
    )


def _ckpt(name: str, kind: str, framework: str, anchors: tuple[str, ...], pattern: str, example: str) -> Rule:
    return Rule(
        name=name, kind="checkpoint", anchors=anchors, pattern=pattern, label=kind, framework=framework, example=example
    )


def _progress(name: str, phase: str, framework: str, anchors: tuple[str, ...], pattern: str, example: str) -> Rule:
    return Rule(
        name=name, kind="progress", anchors=anchors, pattern=pattern, label=phase, framework=framework, example=example
    )


def _rate(name: str, metric: str, anchors: tuple[str, ...], pattern: str, example: str, scale: float = 1.0) -> Rule:
    return Rule(
        name=name, kind="throughput", anchors=anchors, pattern=pattern, label=metric, scale=scale, example=example
    )


def _benign(name: str, anchors: tuple[str, ...], pattern: str, example: str) -> Rule:
    return Rule(name=name, kind="benign", anchors=anchors, pattern=pattern, example=example)


_NUM = r"(?P<value>[0-9][0-9,]*(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)"

# Order matters within crash rules: the first match wins, so the specific (CUDA OOM) comes
# before the general (host MemoryError, CUDA error).
CRASH_RULES: tuple[Rule, ...] = (
    _crash(
        "test_segfault",
        SEGFAULT,
        ("segmentation fault: artificial",),
        r"[Rr]ank\s?(?P<rank>\d+): \(\d+\) segmentation fault: artificial segfault",
        "Rank0: (1) segmentation fault: artificial segfault",
    ),
    _crash(
        "cuda_oom",
        CUDA_OOM,
        (
            "CUDA out of memory",
            "OutOfMemoryError",
            "CUDA error: out of memory",
            "Cuda failure 'out of memory'",
            "CUBLAS_STATUS_ALLOC_FAILED",
        ),
        r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|Cuda failure 'out of "
        r"memory'|CUBLAS_STATUS_ALLOC_FAILED",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total "
        "capacity of 79.15 GiB",
    ),
    _crash(
        "nccl_watchdog_timeout",
        NCCL_TIMEOUT,
        (
            "Watchdog caught collective operation timeout",
            "collective operation timeout",
            "watchdog got stuck",
            "NCCL operations have failed or timed out",
            "NCCL timeout",
        ),
        r"Watchdog caught collective operation timeout|collective operation "
        r"timeout|ProcessGroupNCCL's watchdog got stuck|NCCL operations have failed or timed out|NCCL timeout",
        "[rank3]:[E1130 02:34:15.123456 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=81, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
        "Timeout(ms)=600000) ran for 600023 milliseconds before timing out.",
    ),
    _crash(
        "nvidia_xid",
        XID,
        ("NVRM: Xid",),
        r"NVRM: Xid \((?P<pci>[^)]*)\):\s*(?P<xid>\d+)",
        "Nov 30 02:34:15 node12 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=12345, name=python, GPU "
        "has fallen off the bus.",
    ),
    *GPU_RULES,
    _crash(
        "slurm_node_failure",
        NODE_FAIL,
        ("DUE TO NODE FAILURE", "Node failure on"),
        r"\*\*\* (?:JOB|STEP) [\w.+]+ ON (?P<node>\S+) CANCELLED AT \S+ DUE TO NODE FAILURE|"
        r"Node failure on (?P<node2>[\w.-]+)|CANCELLED AT \S+ DUE TO NODE FAILURE on (?P<node3>[\w.-]+)",
        "slurmstepd: error: *** JOB 123 ON node3 CANCELLED AT 2026-11-30T02:34:15 DUE TO NODE FAILURE, SEE "
        "SLURMCTLD LOG FOR DETAILS ***",
    ),
    _crash(
        "slurm_time_limit",
        TIME_LIMIT,
        ("DUE TO TIME LIMIT",),
        r"\*\*\* (?:JOB|STEP) [\w.+]+ (?:ON \S+ )?CANCELLED AT \S+ DUE TO TIME LIMIT",
        "slurmstepd: error: *** JOB 123 ON node3 CANCELLED AT 2026-11-30T02:34:15 DUE TO TIME LIMIT ***",
    ),
    *SLURM_RULES,
    *LAUNCHER_RULES,
    _crash(
        "nccl_error",
        NCCL_ERROR,
        (
            "NCCL error",
            "NCCL Error",
            "ncclInternalError",
            "ncclSystemError",
            "ncclUnhandledCudaError",
            "ncclRemoteError",
            "ncclInvalidUsage",
            "NCCL communicator was aborted",
            "NCCL WARN",
        ),
        r"NCCL WARN NET/IB ?: Got completion from peer|NCCL [Ee]rror|nccl(?:Internal|System|UnhandledCuda|"
        r"Remote)Error|ncclInvalidUsage|NCCL communicator was aborted|NCCL WARN .*(?:[Ee]rror|[Ff]ailure|"
        r"[Ff]ailed|[Tt]imeout|[Aa]bort|Connection (?:closed|reset|refused))",
        "node7:12345:12399 [3] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
        "10.0.0.8<52914> with error 12, opcode 129, len 0, vendor err 129 (Recv)",
        exclude=r"NET/Plugin|Failed to find|Could not find|Unable to open device|Call to ibv_open_device failed|"
        r"Failed to open lib[\w.\[\]]*\.so|NCCL_[A-Z_]+ set by environment",
    ),
    *NODE_RULES,  # before cuda_error: a GPU the node reports unavailable is the node's, not the program's
    _crash(
        "cuda_error",
        CUDA_ERROR,
        (
            "CUDA error",
            "CUDA Error",
            "cudaError",
            "CUBLAS_STATUS_",
            "CUDNN_STATUS_",
            "CUDA driver error",
            "illegal memory access",
            "device-side assert",
        ),
        r"CUDA [Ee]rror|cudaError\w+|CUBLAS_STATUS_(?!SUCCESS)\w+|CUDNN_STATUS_(?!SUCCESS)\w+|CUDA "
        r"driver error|illegal memory access was encountered|device-side assert triggered",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
    ),
    _crash(
        "host_oom",
        HOST_OOM,
        ("oom-kill", "oom_kill", "Killed process", "invoked oom-killer", "MemoryError", "Out of memory: Kill"),
        r"oom[-_]kill(?:er)? event|invoked oom-killer|oom_kill_process|Out of memory: Kill|Killed "
        r"process \d+|(?<![A-Za-z])MemoryError\b",
        "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=123.0. Some of your processes may "
        "have been killed by the cgroup out-of-memory handler.",
    ),
    _crash(
        "segfault",
        SEGFAULT,
        ("Segmentation fault", "segmentation fault", "SIGSEGV", "Signal 11", "exitcode  : -11", "signal 11"),
        r"[Ss]egmentation fault|SIGSEGV|[Ss]ignal 11\b|exitcode\s*:\s*-11\b",
        "/var/spool/slurmd/job00123/slurm_script: line 42: 12345 Segmentation fault      (core dumped) python train.py",
    ),
    *STRUCTURE_NAN_RULES,
    *NAN_RULES,
    *STRUCTURE_CRASH_RULES,
    _crash(
        "nan_loss",
        NAN_LOSS,
        (
            "oss is NaN",
            "oss is nan",
            "oss is inf",
            "Detected NaN",
            "NaN loss",
            "nan loss",
            "loss: nan",
            "loss: NaN",
            "loss=nan",
            "loss=NaN",
            "'loss': nan",
            "NaN detected",
        ),
        r"[Ll]oss is (?:NaN|nan|inf)\b|Detected NaN|NaN detected|[Nn]a[Nn] loss|loss: [Nn]a[Nn]\b|"
        r"loss=[Nn]a[Nn]\b|'loss': nan\b",
        "ValueError: loss is NaN at iteration 1200",
    ),
    *FILESYSTEM_RULES,
    *CHECKPOINT_FAILURE_RULES,
    *EXCEPTION_LINE_RULES,
    # The traceback start itself: the reader looks ahead for the exception line and lets that decide.
    _crash(
        "python_traceback",
        PYTHON_TRACEBACK,
        (TRACEBACK_START,),
        r"Traceback \(most recent call last\):",
        "Traceback (most recent call last):",
    ),
    # rich's boxed traceback (typer, accelerate, HF scripts with rich installed): the header sits in a frame line.
    _crash(
        "python_rich_traceback",
        PYTHON_TRACEBACK,
        ("Traceback (most recent call last) ",),
        r"[─━╭┏] Traceback \(most recent call last\) [─━╮┓]",
        "╭───────────────────── Traceback (most recent call last) ──────────────────────╮",
    ),
)

BENIGN_RULES: tuple[Rule, ...] = (
    _benign(
        "nccl_info",
        ("NCCL INFO",),
        r"\bNCCL INFO\b",
        "node7:12345:12345 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.7<0>",
    ),
    _benign(
        "python_warning",
        ("Warning:", "warnings.warn"),
        # Not r"\b\w*Warning: ": that matches exactly the lines holding "Warning: " (a word boundary is always
        # found where the word before it starts) and, with no literal to start from, costs 5x more per line.
        r"Warning: |warnings\.warn\(",
        "UserWarning: CUDA error handling is deprecated; use TORCH_NCCL_ASYNC_ERROR_HANDLING instead",
    ),
    _benign(
        "torch_warning_prefix",
        # "W1205 ..." without brackets: glog's month digits follow the level (a logged, caught exception's
        # traceback carries the prefix on every line: torch._dynamo's "WON'T CONVERT ... Traceback").
        ("[W", "]:W", "W0", "W1"),
        r"(?:^|\]:)\[W(?:\d{4}| )|(?:^|\]:)W\d{4} \d\d:\d\d:\d\d\.\d+ \d+ \S+:\d+\]",
        "[rank0]:[W1130 02:34:15.123456 ProcessGroupNCCL.cpp:4115] Warning: NCCL error handling is enabled",
    ),
    _benign(
        "recovered_retry",
        ("succeeded", "recovered", "retrying", "Retrying", "will retry"),
        r"\bsucceeded\b|\brecovered\b|[Rr]etrying\b|will retry",
        "NCCL WARN Connection closed by peer, retrying (1/5)... succeeded",
    ),
    _benign(
        "zero_errors",
        ("errors", "error_"),
        r"\b0 errors\b|errors\s*[=:]\s*0\b|\berror_\w+",
        "validation finished: 0 errors, errors=0",
    ),
)

CHECKPOINT_RULES: tuple[Rule, ...] = (
    _ckpt(
        "megatron_saved",
        "saved",
        "megatron",
        ("uccessfully saved checkpoint from iteration", "uccessfully saved checkpoint at iteration"),
        r"[Ss]uccessfully saved checkpoint (?:from|at) iteration\s+(?P<iteration>\d+)(?: to " + _PATH + ")?",
        "  successfully saved checkpoint from iteration     500 to /ckpt/gpt3 [ t 1/8, p 1/4 ]",
    ),
    _ckpt(
        "megatron_loaded",
        "loaded",
        "megatron",
        ("successfully loaded checkpoint from",),
        r"successfully loaded checkpoint from " + _PATH + r".*?at iteration\s+(?P<iteration>\d+)",
        "  successfully loaded checkpoint from /ckpt/gpt3 [ t 1/1, p 1/1 ] at iteration 500",
    ),
    _ckpt(
        "megatron_loading",
        "loaded",
        "megatron",
        (" loading checkpoint from ",),
        r" loading checkpoint from " + _PATH + r" at iteration (?P<iteration>\d+)",
        " loading checkpoint from /ckpt/gpt3 at iteration 500",
    ),
    _ckpt(
        "nemo_async_saved",
        "saved",
        "nemo",
        ("finalized successfully",),
        r"[Cc]heckpoint save for step (?P<iteration>\d+) \((?P<path>[^)]+)\) finalized successfully",
        "Async checkpoint save for step 500 (/results/checkpoints/step=500.ckpt) finalized successfully.",
    ),
    _ckpt(
        "deepspeed_ready",
        "saved",
        "deepspeed",
        ("is ready now!",),
        r"Checkpoint (?P<tag>\S+) is ready now!",
        "[Torch] Checkpoint global_step500 is ready now!",
    ),
    _ckpt(
        "deepspeed_saving",
        "saved",
        "deepspeed",
        ("Saving model checkpoint: ",),
        r"Saving model checkpoint: " + _PATH,
        "[2026-11-30 02:34:15,123] [INFO] [engine.py:3587:_save_checkpoint] Saving model checkpoint: "
        "/ckpt/global_step500/mp_rank_00_model_states.pt",
    ),
    _ckpt(
        "deepspeed_loaded",
        "loaded",
        "deepspeed",
        ("Loaded checkpoint from", "Loading checkpoint from", "Loading model checkpoint from"),
        r"Load(?:ed|ing) (?:model )?checkpoint from " + _PATH,
        "[Torch] Loaded checkpoint from /ckpt/global_step500/mp_rank_00_model_states.pt.",
    ),
    _ckpt(
        "lightning_saved",
        "saved",
        "lightning",
        ("saving model to '",),
        r"Epoch (?P<epoch>\d+), global step (?P<iteration>\d+):.*saving model to '(?P<path>[^']+)'",
        "Epoch 3, global step 1200: 'val_loss' reached 0.28007 (best 0.28007), saving model to "
        "'/ckpt/epoch=3-step=1200.ckpt' as top 1",
    ),
    _ckpt(
        "lightning_restoring",
        "loaded",
        "lightning",
        ("Restoring states from the checkpoint path at ", "Restored all states from the checkpoint at "),
        r"(?:Restoring states from the checkpoint path at|Restored all states from the checkpoint at) " + _PATH,
        "Restoring states from the checkpoint path at /ckpt/epoch=3-step=1200.ckpt",
    ),
    _ckpt(
        "hf_saved",
        "saved",
        "hf_trainer",
        ("Saving model checkpoint to ",),
        r"Saving model checkpoint to " + _PATH,
        "Saving model checkpoint to /out/checkpoint-500",
    ),
    _ckpt(
        "hf_loaded",
        "loaded",
        "hf_trainer",
        ("Loading model from ",),
        r"Loading model from " + _PATH,
        "Loading model from /out/checkpoint-500.",
    ),
    _ckpt(
        "torchtitan_saved",
        "saved",
        "torchtitan",
        ("Finished saving the checkpoint",),
        r"Finished saving the checkpoint",
        "[rank0]:2026-11-30 02:34:15,616 - root - INFO - Finished saving the checkpoint (or staging "
        "if async is enabled)in 1.23 seconds.",
    ),
    _ckpt(
        "torchtitan_loading",
        "loaded",
        "torchtitan",
        ("Loading the checkpoint at step ", "Loading the checkpoint from "),
        r"Loading the checkpoint (?:at step (?P<iteration>\d+)|from " + _PATH + ")",
        "[rank0]:2026-11-30 02:34:15,616 - root - INFO - Loading the checkpoint at step 100.",
    ),
    _ckpt(
        "pytorch_saved",
        "saved",
        "pytorch",
        ("aved checkpoint to ", "heckpoint saved: ", "heckpoint saved to "),
        r"[Ss]aved checkpoint to "
        + _PATH
        + r"(?: at (?:step|iteration) (?P<iteration>\d+))?|[Cc]heckpoint saved(?::| to) "
        + _PATH.replace("path", "path2"),
        "saved checkpoint to /ckpt/model_step_1200.pt at step 1200",
    ),
    _ckpt(
        "pytorch_resumed",
        "loaded",
        "pytorch",
        ("esuming from checkpoint ", "esumed from checkpoint "),
        r"[Rr]esum(?:ing|ed) from checkpoint " + _PATH + r"(?: \((?:step|iteration) (?P<iteration>\d+)\))?",
        "Resuming from checkpoint /ckpt/model_step_1200.pt (step 1200)",
    ),
)

PROGRESS_RULES: tuple[Rule, ...] = (
    _progress(
        "nemo_training_epoch",
        TRAININGLOOP,
        "nemo",
        ("Training epoch ",),
        r"Training epoch \d+, iteration (?P<iteration>\d+)/\d+",
        "Training epoch 0, iteration 100/1000 | lr: 0.0003 | global_batch_size: 256 | global_step: "
        "100 | reduced_train_loss: 2.34",
    ),
    _progress(
        "megatron_iteration",
        TRAININGLOOP,
        "megatron",
        (" iteration ",),
        r"\biteration\s+(?P<iteration>\d+)/\s*\d+\s*\|",
        " [2026-11-30 02:34:15] iteration      100/  500000 | consumed samples:        12800 | "
        "elapsed time per iteration (ms): 1234.5 | lm loss: 2.345678E+00 |",
    ),
    _progress(
        "hf_log_dict",
        TRAININGLOOP,
        "hf_trainer",
        ("{'loss': ",),
        r"\{'loss': [0-9.eE+-]+,.*'epoch': [0-9.]+",
        "{'loss': 1.2345, 'grad_norm': 0.5, 'learning_rate': 4.9e-05, 'epoch': 0.5}",
    ),
    _progress(
        "torchtitan_step",
        TRAININGLOOP,
        "torchtitan",
        ("step: ",),
        r"\bstep:\s*(?P<iteration>\d+)(?:/\d+)?(?:\s*=\s*[\d.]+%)?\s+loss:",
        "[rank0]:2026-11-30 02:34:15,123 - root - INFO - step: 10  loss:  7.9123  memory: "
        "30.12GiB(38.06%)  tps: 1,234  tflops: 71.21  mfu: 22.82%",
    ),
    _progress(
        "deepspeed_steps",
        TRAININGLOOP,
        "deepspeed",
        ("steps: ", ", skipped="),
        r"\bsteps: (?P<iteration>\d+) loss: |\bstep=(?P<iteration2>\d+), skipped=\d+",
        "steps: 100 loss: 2.3456 iter time (s): 0.512 samples/sec: 250.1",
    ),
    _progress(
        "lightning_progress",
        TRAININGLOOP,
        "lightning",
        ("Epoch ",),
        r"Epoch \d+:(?: :)?\s+\d+%\|[^|]*\|\s*(?P<iteration>[1-9]\d*)/\d+",
        "Epoch 1:  45%|████▌     | 450/1000 [01:23<01:40,  5.41it/s, v_num=0, loss=2.34]",
    ),
    _progress(
        "megatron_training_start",
        PRETRAINING,
        "megatron",
        ("training ...", "[before the start of training step]"),
        r"(?:^|\]\s?|:\s?)training \.\.\.\s*$|\[before the start of training step\]",
        "[before the start of training step] datetime: 2026-11-30 02:34:15",
    ),
    _progress(
        "hf_running_training",
        PRETRAINING,
        "hf_trainer",
        ("***** Running training *****",),
        r"\*\*\*\*\* Running training \*\*\*\*\*",
        "***** Running training *****",
    ),
    _progress(
        "lightning_epoch_start",
        PRETRAINING,
        "lightning",
        ("Epoch ",),
        r"Epoch \d+:(?: :)?\s+0%\|[^|]*\|\s*0/\d+",
        "Epoch 0:   0%|          | 0/1000 [00:00<?, ?it/s]",
    ),
    _progress(
        "torchtitan_training_starts",
        PRETRAINING,
        "torchtitan",
        ("Training starts at step",),
        r"Training starts at step (?P<iteration>\d+)",
        "[rank0]:2026-11-30 02:34:15,123 - root - INFO - Training starts at step 1.",
    ),
)

THROUGHPUT_RULES: tuple[Rule, ...] = (
    _rate(
        "megatron_tflops_per_gpu",
        "tflops_per_gpu",
        ("(TFLOP/s/GPU):",),
        r"\(TFLOP/s/GPU\):\s*" + _NUM,
        "... | throughput per GPU (TFLOP/s/GPU): 412.3 | ...",
    ),
    _rate(
        "tflops",
        "tflops",
        ("TFLOPs: ", "tflops: ", "TFLOPS: "),
        r"\b(?:TFLOPs|tflops|TFLOPS):\s*" + _NUM,
        "| TFLOPs: 123.4 |",
    ),
    _rate(
        "megatron_iter_ms",
        "iter_ms",
        ("elapsed time per iteration (ms):",),
        r"elapsed time per iteration \(ms\):\s*" + _NUM,
        "... | elapsed time per iteration (ms): 1234.5 | ...",
    ),
    _rate(
        "iter_time_s",
        "iter_ms",
        ("iter time (s): ",),
        r"iter time \(s\):\s*" + _NUM,
        "steps: 100 loss: 2.3456 iter time (s): 0.512 samples/sec: 250.1",
        scale=1000.0,
    ),
    _rate(
        "samples_per_s",
        "samples_per_s",
        ("samples/sec: ", "samples per second: ", "samples/s: ", "'train_samples_per_second': "),
        r"(?:samples/sec|samples per second|samples/s|'train_samples_per_second'):\s*" + _NUM,
        "... | samples per second: 103.7 | ...",
    ),
    _rate(
        "tokens_per_s",
        "tokens_per_s",
        ("tps: ", "tokens/s: ", "tokens/sec: ", "tokens per second: "),
        r"(?:\btps|tokens/s|tokens/sec|tokens per second):\s*" + _NUM,
        "step: 10  loss:  7.9  memory: 30.1GiB(38.06%)  tps: 1,234  mfu: 22.82%",
    ),
    _rate("mfu", "mfu_pct", ("mfu: ",), r"\bmfu:\s*" + _NUM + "%", "step: 10  loss:  7.9  tps: 1,234  mfu: 22.82%"),
    _rate(
        "it_per_s",
        "it_per_s",
        ("it/s",),
        r"\b" + _NUM + r"it/s\b",
        "Epoch 1:  45%|████▌     | 450/1000 [01:23<01:40,  5.41it/s, v_num=0]",
    ),
)

DEFAULT_RULES: tuple[Rule, ...] = (
    CRASH_RULES
    + BENIGN_RULES
    + CHECKPOINT_RULES
    + REALWORLD_CHECKPOINT_RULES
    + STRUCTURE_CHECKPOINT_RULES
    + PROGRESS_RULES
    + THROUGHPUT_RULES
)


def default_ruleset() -> RuleSet:
    """The rules used when no signatures file is configured."""
    return RuleSet(DEFAULT_RULES)
