"""Built-in rules for what real clusters print: launcher/Slurm summaries, GPU driver lines, NaN metrics, filesystems.

Every example line is quoted from a public bug report (docs/signatures.md lists each with its rule);
the source of each is in tests/domain/test_signatures_realworld.py. `signature_defaults` places
these rules among the older ones: order matters, the first matching crash rule wins.
"""

from __future__ import annotations

from app.domain.detection.signatures import (
    CHECKPOINT_WRITE_FAILURE,
    CUDA_ERROR,
    FILESYSTEM,
    HOST_OOM,
    NAN_LOSS,
    NCCL_ERROR,
    NCCL_TIMEOUT,
    NODE_FAIL,
    PYTHON_TRACEBACK,
    SEGFAULT,
    XID,
    Rule,
)

_PATH = r"(?P<path>\S+)"
_TASKS = r"(?:task (?P<rank>\d+)|tasks [\d,\-]+)"  # srun's task N is the rank it launched


def _crash(name: str, category: str, anchors: tuple[str, ...], pattern: str, example: str, exclude: str = "") -> Rule:
    return Rule(
        name=name, kind="crash", anchors=anchors, pattern=pattern, label=category, exclude=exclude, example=example
    )


def _ckpt(name: str, kind: str, framework: str, anchors: tuple[str, ...], pattern: str, example: str) -> Rule:
    return Rule(
        name=name, kind="checkpoint", anchors=anchors, pattern=pattern, label=kind, framework=framework, example=example
    )


# GPU driver and hardware lines without an Xid number (tried before the generic CUDA error rule,
# so "CUDA error: uncorrectable ECC error encountered" is hardware, not the program).
GPU_RULES: tuple[Rule, ...] = (
    _crash(
        "gpu_fallen_off_bus",
        XID,
        ("fallen off the bus", "lost from the bus", "NV_ERR_GPU_IS_LOST"),
        r"fallen off the bus|GPU lost from the bus|NV_ERR_GPU_IS_LOST",
        "NVRM: GPU at 0000:01:00.0 has fallen off the bus.",
    ),
    _crash(
        "gpu_gsp_timeout",
        XID,
        (
            "heartbeat timed out",
            "Heartbeat timed out",
            "RPC from GSP",
            "RPC response from GPU",
            "GSP-CrashCat Report",
            "GSP task watchdog timeout",
        ),
        r"GSP-CrashCat Report|GSP task watchdog timeout|GSP RM heartbeat timed out|_kgspIsHeartbeatTimedOut: Heartbeat timed out|Timeout waiting for RPC from GSP|waiting for RPC response from GPU\d* GSP",  # noqa: E501
        "Mar 21 21:42:01 kernel: NVRM: GPU0 _kgspRpcRecvPoll: GSP RM heartbeat timed out",
    ),
    # The driver's NVLink layer (knvlink*/nvlink*) reporting a failed link operation: a fabric fault of the node,
    # whether or not an Xid follows.
    _crash(
        "gpu_nvlink_failure",
        XID,
        ("knvlink", "nvlink", "NVLink"),
        r"NVRM: [^\n]{0,40}?\b(?:knvlink|nvlink)\w*: [^\n]*\b(?:failed|[Ff]atal|timed? ?out)\b",
        "Jul 09 10:42:47 pool0-0082 kernel: NVRM: knvlinkDiscoverPostRxDetLinks_GH100: Getting peer0's "
        "postRxDetLinkMask failed!",
    ),
    _crash(
        "gpu_uncorrectable_ecc",
        XID,
        ("ncorrectable ECC error", "ECC_UNCORRECTABLE", "ncorrectable double bit error", "DBE (double bit error)"),
        r"[Uu]ncorrectable ECC error|CUDA_ERROR_ECC_UNCORRECTABLE|[Uu]ncorrectable double bit error|DBE \(double bit error\)",  # noqa: E501
        "RuntimeError: CUDA error: uncorrectable ECC error encountered",
        exclude=r"ECC errors?\s*[:=]\s*0\b",
    ),
    _crash(
        "gpu_row_remap_failure",
        XID,
        ("emapping failure", "Remapping Failure Occurred", "emap failure", "emapper recording failure"),
        r"[Rr]ow[- ]?[Rr]emap(?:ping)? failure|Remapping Failure Occurred\s*:\s*Yes|row remapper recording failure",
        "        Remapping Failure Occurred        : Yes",
    ),
    _crash(
        "gpu_reset_required",
        XID,
        ("NV_ERR_RESET_REQUIRED",),
        r"NV_ERR_RESET_REQUIRED",
        "[Sun Jan 11 09:52:01 2026] NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062) returned from status @ kernel_channel.c:2874",  # noqa: E501 - quoted as printed
    ),
    _crash(
        "gpu_remapped_rows_uncorrectable",
        XID,
        ("Uncorrectable Error",),
        r"^\s+Uncorrectable Error\s+:\s*[1-9]\d*\s*$",
        "        Uncorrectable Error               : 4",
    ),
    _crash(
        "nvidia_smi_device_handle",
        XID,
        ("Unable to determine the device handle",),
        r"Unable to determine the device handle for GPU ?[0-9A-Fa-f:.]+",
        "Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error",
    ),
)

# Launchers' failure summaries: torchrun / torch.distributed.elastic. A negative exit code is a signal.
LAUNCHER_RULES: tuple[Rule, ...] = (
    # A program that says it could not load what it needs and is exiting (Megatron's checkpoint loader): a
    # deliberate exit without a traceback.
    _crash(
        "announced_exit_after_failed_load",
        PYTHON_TRACEBACK,
        ("exiting", "Exiting"),
        r"(?i:\b(?:unable|failed) to (?:load|restore|read|open)\b[^\n]{0,400}?[,;.]\s*exiting\b)",
        "Unable to load optimizer from checkpoint /data/iter_0000001/mp_rank_00/model_optim_rng.pt. Specify "
        "--no-load-optim or --finetune to prevent attempting to load the optimizer state, exiting ...",
    ),
    _crash(
        "torch_elastic_failed_signal",
        SEGFAULT,
        ("failed (exitcode: -11)", "failed (exitcode: -7)", "failed (exitcode: -6)"),
        r"failed \(exitcode: -(?:11|7|6)\) local_rank: \d+",
        "[2024-11-26 02:04:31,514] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -11) local_rank: 1 (pid: 750662) of binary: /home/user/anaconda3/envs/hallo/bin/python",  # noqa: E501 - quoted as printed
    ),
    _crash(
        "torch_elastic_failed_sigkill",
        HOST_OOM,
        ("failed (exitcode: -9)",),
        r"failed \(exitcode: -9\) local_rank: \d+",
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 3 (pid: 812917) of binary: /data/user/anaconda3/envs/ColossalAI-Chat/bin/python",  # noqa: E501 - quoted as printed
    ),
    _crash(
        "torch_elastic_failed",
        PYTHON_TRACEBACK,
        ("failed (exitcode: ",),
        r"failed \(exitcode: -?\d+\) local_rank: \d+",
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0 (pid: 1622990) of binary: /home/user/anaconda3/envs/lang/bin/python",  # noqa: E501 - quoted as printed
    ),
    _crash(
        "torch_elastic_exitcode_signal",
        SEGFAULT,
        ("exitcode  : -7", "exitcode  : -6", "exitcode: -7", "exitcode: -6", "(SIGBUS)", "(SIGABRT)"),
        r"exitcode\s*:\s*-(?:7|6)\b|[Ss]ignal (?:7 \(SIGBUS\)|6 \(SIGABRT\))",
        "  traceback : Signal 7 (SIGBUS) received by PID 467397",
    ),
    _crash(
        "torch_elastic_exitcode",
        PYTHON_TRACEBACK,
        ("exitcode  : ", "exitcode: "),
        r"^\s*exitcode\s*:\s*\d+ \(pid: \d+\)",
        "  exitcode  : 1 (pid: 429)",
    ),
    _crash(
        "torch_elastic_sigkill",
        HOST_OOM,
        ("exitcode  : -9", "exitcode: -9", "(SIGKILL) received", "Signals.SIGKILL"),
        r"exitcode\s*:\s*-9\b|[Ss]ignal 9 \(SIGKILL\) received|Signals\.SIGKILL",
        "  traceback : Signal 9 (SIGKILL) received by PID 14750",
    ),
)

# Slurm's own lines in the job output (and slurmctld's log, when that is what was pasted), and the shell's.
SLURM_RULES: tuple[Rule, ...] = (
    _crash(
        "shell_killed",
        HOST_OOM,
        ("Killed",),
        r"^\s*Killed\s*$|: line \d+: +\d+ Killed\s",
        "/var/spool/slurmd/job00191/slurm_script: line 28:  8156 Killed                  python3 main.py --prop hform",
    ),
    _crash(
        "dataloader_worker_killed",
        HOST_OOM,
        ("is killed by signal: Killed",),
        r"DataLoader worker \(pid\(?s?\)? ?[\d, ]+\) is killed by signal: Killed",
        "RuntimeError: DataLoader worker (pid 19597) is killed by signal: Killed.",
    ),
    _crash(
        "dist_store_timeout",
        NCCL_TIMEOUT,
        ("DistStoreError: ", "DistNetworkError: The client socket has timed out"),
        r"DistStoreError: (?:Timed out after \d+ seconds waiting for|Socket Timeout|wait timeout)"
        r"|DistNetworkError: The client socket has timed out",
        "torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for clients. 1/3 clients joined.",
    ),
    _crash(
        "shell_core_dumped",
        SEGFAULT,
        ("(core dumped)",),
        r"(?:[Bb]us [Ee]rror|Aborted|Illegal instruction|Floating point exception)\s+\(core dumped\)",
        "Bus error (core dumped)",
    ),
    _crash(
        "srun_task_launch_failed",
        NODE_FAIL,
        ("Task launch for ",),
        r"srun: error: Task launch for \S+ failed on node (?P<node>[\w.\-]+)",
        "srun: error: Task launch for 36.0 failed on node cn131: Job credential expired",
    ),
    _crash(
        "slurmctld_node_failed",
        NODE_FAIL,
        ("state set to FAIL", "state set to DOWN", "not responding, setting DOWN"),
        r"update_node: node (?P<node>[\w.\-]+) state set to (?:FAIL|DOWN)|Nodes? (?P<node2>[\w.\-\[\],]+) not responding, setting DOWN",  # noqa: E501 - quoted as printed
        "[2024-03-08T00:15:18.986] update_node: node ip-10-1-73-87 state set to FAIL",
    ),
    _crash(
        "srun_task_out_of_memory",
        HOST_OOM,
        ("Out Of Memory",),
        r"srun: error: (?P<node>[\w.\-]+): " + _TASKS + r": Out Of Memory",
        "srun: error: nid001277: tasks 1-3: Out Of Memory",
    ),
    _crash(
        "srun_task_killed",
        HOST_OOM,
        (": Killed",),
        r"srun: error: (?P<node>[\w.\-]+): " + _TASKS + r": Killed",
        "srun: error: c002: task 0: Killed",
    ),
    _crash(
        "srun_task_signal",
        SEGFAULT,
        (": Segmentation fault", ": Bus error", ": Aborted"),
        r"srun: error: (?P<node>[\w.\-]+): " + _TASKS + r": (?:Segmentation fault|Bus error|Aborted)",
        "srun: error: Orion-18-69: task 289: Bus error",
    ),
    _crash(
        "srun_task_exited",
        PYTHON_TRACEBACK,
        (": Exited with exit code", ": Terminated"),
        r"srun: error: (?P<node>[\w.\-]+): " + _TASKS + r": (?:Exited with exit code \d+|Terminated)",
        "srun: error: nid002888: tasks 0-57,59-63: Terminated",
    ),
    _crash(
        "slurm_step_task_failure",
        PYTHON_TRACEBACK,
        ("DUE TO TASK FAILURE",),
        r"\*\*\* (?:JOB|STEP) [\w.+]+ ON (?P<node>\S+) CANCELLED AT \S+ DUE TO TASK FAILURE",
        "[2026-04-29T23:36:37.809] error: *** STEP 52222788.0 ON nid002888 CANCELLED AT 2026-04-29T23:36:37 DUE TO TASK FAILURE ***",  # noqa: E501 - quoted as printed
    ),
    _crash(
        "slurm_preempted",
        NODE_FAIL,
        ("DUE TO PREEMPTION",),
        r"\*\*\* (?:JOB|STEP) [\w.+]+ ON \S+ CANCELLED AT \S+ DUE TO PREEMPTION",
        "slurmstepd: error: *** JOB 32391783 ON cn119 CANCELLED AT 2021-06-18T13:05:36 DUE TO PREEMPTION ***",
    ),
)

NAN_RULES: tuple[Rule, ...] = (
    # "nan_metric" (a non-finite value in any metric field) is structural: app/domain/detection/rules_structure.py
    _crash(
        "nan_reported",
        NAN_LOSS,
        (
            "NaN or Inf found in input tensor",
            "found NaN in",
            "returned nan values",
            "is non-finite",
        ),
        r"NaN or Inf found in input tensor|found NaN in|returned nan values|gradients? .*is non-finite",
        "RuntimeError: The total norm of order 2.0 for gradients from `parameters` is non-finite, so it cannot be clipped.",  # noqa: E501 - quoted as printed
    ),
)

# Filesystem failures: their own category. ENOSPC/EDQUOT/EROFS are the user's path; ESTALE/EIO shared storage.
FILESYSTEM_RULES: tuple[Rule, ...] = (
    _crash(
        "filesystem_no_space",
        FILESYSTEM,
        ("No space left on device", "[Errno 28]", "ENOSPC"),
        r"No space left on device|\[Errno 28\]|\bENOSPC\b",
        "OSError: [Errno 28] No space left on device: '/ckpt/iter_0000500/__0_0.distcp'",
    ),
    _crash(
        "filesystem_quota",
        FILESYSTEM,
        ("Disk quota exceeded", "[Errno 122]", "EDQUOT"),
        r"Disk quota exceeded|\[Errno 122\]|\bEDQUOT\b",
        "OSError: [Errno 122] Disk quota exceeded",
    ),
    _crash(
        "filesystem_read_only",
        FILESYSTEM,
        ("Read-only file system", "[Errno 30]", "EROFS"),
        r"Read-only file system|\[Errno 30\]|\bEROFS\b",
        "OSError: [Errno 30] Read-only file system: '/data/stop_addon_state.json'",
    ),
    _crash(
        "filesystem_stale_handle",
        FILESYSTEM,
        ("Stale file handle", "[Errno 116]", "ESTALE"),
        r"Stale file handle|\[Errno 116\]|\bESTALE\b",
        "OSError: [Errno 116] Stale file handle",
    ),
    _crash(
        "filesystem_io_error",
        FILESYSTEM,
        ("Input/output error", "[Errno 5]", "EIO"),
        r"Input/output error|\[Errno 5\] |\bEIO\b",
        "OSError: [Errno 5] Input/output error",
    ),
)

CHECKPOINT_FAILURE_RULES: tuple[Rule, ...] = (
    _crash(
        "checkpoint_write_failure",
        CHECKPOINT_WRITE_FAILURE,
        (
            "ailed to save checkpoint",
            "ailed to write checkpoint",
            "rror saving checkpoint",
            "rror while saving checkpoint",
            "heckpoint save failed",
            "heckpoint saving failed",
            "PytorchStreamWriter failed",
            "unexpected pos ",
            "Parent directory ",
            "cannot be opened.",
        ),
        r"[Ff]ailed to (?:save|write) (?:the )?checkpoint|[Ee]rror (?:while )?saving (?:the )?checkpoint|[Cc]heckpoint sav(?:e|ing) failed|PytorchStreamWriter failed|inline_container\.cc:\d+\] \. unexpected pos \d+ vs \d+|Parent directory \S+ does not exist|File \S+ cannot be opened\.",  # noqa: E501
        "RuntimeError: [enforce fail at inline_container.cc:471] . PytorchStreamWriter failed writing file data/3: file write failed",  # noqa: E501 - quoted as printed
    ),
)

GPU_RULES = GPU_RULES + (
    _crash(
        "cuda_kernel_assert",
        CUDA_ERROR,
        ("Assertion `",),
        r"\.cu:\d+: \w+: block: \[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\] Assertion `.*` failed",
        "/pytorch/aten/src/ATen/native/cuda/Loss.cu:455: nll_loss_backward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [12,0,0] Assertion `t >= 0 && t < n_classes` failed.",  # noqa: E501 - quoted as printed
    ),
    _crash(
        "nccl_cuda_failure",
        CUDA_ERROR,
        ("NCCL WARN Cuda failure ",),
        r"NCCL WARN Cuda failure (?:\d+ )?'",
        "n122-164-108:7400:7642 [1] include/alloc.h:125 NCCL WARN Cuda failure 700 'an illegal memory access was encountered'",  # noqa: E501 - quoted as printed
    ),
    _crash(
        "fatal_abort",
        SEGFAULT,
        ("Fatal Python error: Aborted", "terminate called "),
        r"Fatal Python error: Aborted|terminate called (?:without an active exception|after throwing an instance of)",
        "[rank0]:Fatal Python error: Aborted",
    ),
    _crash(
        "nccl_duplicate_gpu",
        NCCL_ERROR,
        ("Duplicate GPU detected",),
        r"NCCL WARN Duplicate GPU detected",
        "qgpu2018:59522:59993 [0] init.cc:795 NCCL WARN Duplicate GPU detected : rank 6 and rank 4 both on CUDA device 31000",  # noqa: E501 - quoted as printed
    ),
)

REALWORLD_CHECKPOINT_RULES: tuple[Rule, ...] = (
    _ckpt(
        "torchtitan_saving_step",
        "saved",
        "torchtitan",
        ("Saving a full checkpoint at last step, step ", "Saving a checkpoint at step "),
        r"Saving a (?:full )?checkpoint at (?:last step, )?step (?P<iteration>\d+)",
        "[rank0]:2025-04-01 00:25:54,090 - root - INFO - Saving a full checkpoint at last step, step 644.",
    ),
    _ckpt(
        "nemo_global_save",
        "saved",
        "nemo",
        ("Global Checkpoint Save : ",),
        r"Global Checkpoint Save : Rank ?: ?\d+ : Iteration ?: ?(?P<iteration>\d+)",
        "[NeMo I 2025-06-18 21:57:05 nemo_logging:393] Global Checkpoint Save : Rank: 0 : Iteration: 4 : Start time: 1750309024.990s : Save duration: 0.217s",  # noqa: E501 - quoted as printed
    ),
    _ckpt(
        "nemo_restore",
        "loaded",
        "nemo",
        (
            "Global Checkpoint Load : ",
            "Restoring model weights from RestoreConfig",
            "Finished restoring from RestoreConfig",
        ),
        r"Global Checkpoint Load : |(?:Restoring model weights from|Finished restoring from) RestoreConfig\(path='(?P<path>[^']+)'",  # noqa: E501 - quoted as printed
        "[NeMo I 2025-06-18 21:57:00 nemo_logging:393] Finished restoring from RestoreConfig(path='nemo2_evo2_1b_8k', adapter_path=None, load_model_state=True, load_optim_state=False, load_artifacts=True), cleaning up.",  # noqa: E501 - quoted as printed
    ),
    _ckpt(
        "mmengine_resume",
        "loaded",
        "mmengine",
        ("Resume checkpoint from ", "esumed from the latest checkpoint "),
        r"(?:Resume checkpoint from|[Aa]uto resumed from the latest checkpoint) " + _PATH,
        "05/11 14:58:00 - mmengine - INFO - Resume checkpoint from /root/train/lora_output/iter_300.pth",
    ),
    _ckpt(
        "vits_saving_state",
        "saved",
        "pytorch",
        ("Saving model and optimizer state at iteration ",),
        r"Saving model and optimizer state at iteration (?P<iteration>\d+) to " + _PATH,
        "INFO:32k:Saving model and optimizer state at iteration 55 to ./logs\\32k\\G_5000.pth",
    ),
    _ckpt(
        "hf_continuing",
        "loaded",
        "hf_trainer",
        ("Continuing training from global step ",),
        r"Continuing training from global step (?P<iteration>\d+)",
        "[INFO|trainer.py:1791] 2023-12-12 10:12:06,000 >>   Continuing training from global step 200000",
    ),
)

# A final exception line quoted without its traceback (the start scrolled away or was cut).
_EXCEPTIONS = (
    "ModuleNotFoundError",
    "ImportError",
    "SyntaxError",
    "IndentationError",
    "KeyError",
    "ValueError",
    "TypeError",
    "AttributeError",
    "NameError",
    "FileNotFoundError",
    "AssertionError",
    "IndexError",
    "NotImplementedError",
    "ZeroDivisionError",
    "ChildFailedError",
)
# A launcher's label before a process's line: "[rank3]:", "rank3:", "3: " (srun -l), "[default0]:", "[host1:0]" (--tee).
_LAUNCHER_TAG = r"^(?:\[?[Rr]ank\s?\d+\]?:\s?|\[[A-Za-z][\w.-]*:?\d+\]:?\s?|\d+: )?"
EXCEPTION_LINE_RULES: tuple[Rule, ...] = (
    _crash(
        "python_exception_line",
        PYTHON_TRACEBACK,
        tuple(name + ":" for name in _EXCEPTIONS),
        _LAUNCHER_TAG + r"(?:[\w.]+\.)?(?:" + "|".join(_EXCEPTIONS) + r"):",
        "ModuleNotFoundError: No module named 'project'",
    ),
    # By structure: a line that starts (after a launcher's rank label: "[rank3]:", "[default0]:", torchrun --tee's
    # "[host1:0]") with a dotted exception class name and a
    # message is the last line of an uncaught exception whose traceback the excerpt or the buffer lost.
    _crash(
        "python_exception_class_line",
        PYTHON_TRACEBACK,
        ("Error: ", "Exception: "),
        _LAUNCHER_TAG + r"(?:[a-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception): \S",
        "torch.distributed.elastic.rendezvous.api.RendezvousClosedError: rendezvous closed",
    ),
)
