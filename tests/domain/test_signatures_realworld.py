"""Real lines from public bug reports (source in the comment) against the built-in rules."""

import pytest

from app.domain.detection.rules_builtin import default_ruleset
from app.domain.detection.signatures import CheckpointEvent, Classifier, CrashSignature

C = Classifier(default_ruleset())

# (line, category, rule, nodes, xid)
CRASHES = [
    # https://github.com/fudan-generative-vision/hallo2/issues/56
    (
        "[2024-11-26 02:04:31,514] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -11) local_rank: 1 (pid: 750662) of binary: /home/user/anaconda3/envs/hallo/bin/python",  # noqa: E501 - quoted as printed
        "SEGFAULT",
        "torch_elastic_failed_signal",
        (),
        None,
    ),
    # https://github.com/hpcaitech/ColossalAI/issues/3514
    (
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 3 (pid: 812917) of binary: /data/user/anaconda3/envs/ColossalAI-Chat/bin/python",  # noqa: E501 - quoted as printed
        "HOST_OOM",
        "torch_elastic_failed_sigkill",
        (),
        None,
    ),
    # https://github.com/Facico/Chinese-Vicuna/issues/113
    (
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0 (pid: 1622990) of binary: /home/user/anaconda3/envs/lang/bin/python",  # noqa: E501 - quoted as printed
        "PYTHON_TRACEBACK",
        "torch_elastic_failed",
        (),
        None,
    ),
    # https://github.com/lzhxmu/CPPO/issues/6
    ("  exitcode  : -9 (pid: 14750)", "HOST_OOM", "torch_elastic_sigkill", (), None),
    ("  traceback : Signal 9 (SIGKILL) received by PID 14750", "HOST_OOM", "torch_elastic_sigkill", (), None),
    # https://github.com/Topdu/OpenOCR/issues/71
    ("  exitcode  : -7 (pid: 467397)", "SEGFAULT", "torch_elastic_exitcode_signal", (), None),
    ("  traceback : Signal 7 (SIGBUS) received by PID 467397", "SEGFAULT", "torch_elastic_exitcode_signal", (), None),
    # https://github.com/NVIDIA/Megatron-LM/issues/1880
    ("  traceback : Signal 11 (SIGSEGV) received by PID 6421", "SEGFAULT", "segfault", (), None),
    # https://github.com/ArjunaCluster/ArjunaUsers/issues/48
    ("srun: error: c002: task 0: Killed", "HOST_OOM", "srun_task_killed", ("c002",), None),
    # https://github.com/chrisknewman/tusas/issues/149
    ("srun: error: nid001277: tasks 1-3: Out Of Memory", "HOST_OOM", "srun_task_out_of_memory", ("nid001277",), None),
    (
        "slurmstepd: error: Detected 1 oom_kill event in StepId=440575.0. Some of the step tasks have been OOM Killed.",
        "HOST_OOM",
        "host_oom",
        (),
        None,
    ),
    # https://github.com/hafs-community/HAFS/issues/101
    ("srun: error: Orion-18-69: task 289: Bus error", "SEGFAULT", "srun_task_signal", ("Orion-18-69",), None),
    # https://github.com/desihub/desispec/issues/2744
    (
        "srun: error: nid002888: tasks 0-57,59-63: Terminated",
        "PYTHON_TRACEBACK",
        "srun_task_exited",
        ("nid002888",),
        None,
    ),
    (
        "[2026-04-29T23:36:37.809] error: *** STEP 52222788.0 ON nid002888 CANCELLED AT 2026-04-29T23:36:37 DUE TO TASK FAILURE ***",  # noqa: E501 - quoted as printed
        "PYTHON_TRACEBACK",
        "slurm_step_task_failure",
        ("nid002888",),
        None,
    ),
    # https://github.com/SystemsGenetics/GEMmaker/pull/242
    (
        "slurmstepd: error: *** JOB 32391783 ON cn119 CANCELLED AT 2021-06-18T13:05:36 DUE TO PREEMPTION ***",
        "NODE_FAIL",
        "slurm_preempted",
        (),
        None,
    ),
    # https://github.com/ZettaAI/zetta_utils/issues/671 (node elided in the source)
    (
        "slurmstepd: error: *** STEP 494583.0 ON ... CANCELLED AT 2024-04-20T09:09:37 DUE TO TIME LIMIT ***",
        "TIME_LIMIT",
        "slurm_time_limit",
        (),
        None,
    ),
    # https://github.com/marbl/canu/issues/1067 (older slurmstepd: node after the reason)
    (
        "slurmstepd: *** JOB 830329 CANCELLED AT 2018-08-06T17:21:44 DUE TO TIME LIMIT on n447 ***",
        "TIME_LIMIT",
        "slurm_time_limit",
        (),
        None,
    ),
    # https://github.com/Bumblebee-Project/Bumblebee/issues/554
    ("[   49.261458] NVRM: GPU at 0000:01:00.0 has fallen off the bus.", "XID", "gpu_fallen_off_bus", (), None),
    # https://github.com/ublue-os/bazzite/issues/4449
    (
        "Mar 21 21:42:01 kernel: NVRM: GPU0 _kgspRpcRecvPoll: GSP RM heartbeat timed out",
        "XID",
        "gpu_gsp_timeout",
        (),
        None,
    ),
    # https://github.com/vllm-project/vllm/issues/5222
    ("RuntimeError: CUDA error: uncorrectable ECC error encountered", "XID", "gpu_uncorrectable_ecc", (), None),
    # https://github.com/nagadit/DeepFaceLab_Linux/issues/89
    (
        "failed call to cuDevicePrimaryCtxRetain: CUDA_ERROR_ECC_UNCORRECTABLE: uncorrectable ECC error encountered",
        "XID",
        "gpu_uncorrectable_ecc",
        (),
        None,
    ),
    # https://github.com/xxd3vin/workspace/issues/19
    (
        "Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error",
        "XID",
        "nvidia_smi_device_handle",
        (),
        None,
    ),
    # https://github.com/NVIDIA/NVSentinel/issues/155
    (
        "NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus",
        "XID",
        "nvidia_xid",
        (),
        79,
    ),
    # https://github.com/epfLLM/Megatron-LLM/issues/33 (lm loss and grad norm inside the metric line)
    (
        " iteration     3385/    8000 | consumed samples:       216640 | elapsed time per iteration (ms): 7624.3 | learning rate: 6.676E-06 | global batch size:    64 | lm loss: nan | loss scale: 1.0 | grad norm: nan | number of skipped iterations:   0 | number of nan iterations:   0 |",  # noqa: E501 - quoted as printed
        "NAN_LOSS",
        "nan_metric",
        (),
        None,
    ),
    # https://github.com/zai-org/ChatGLM-6B/issues/1166
    (
        "RuntimeError: [enforce fail at inline_container.cc:471] . PytorchStreamWriter failed writing file data/3: file write failed",  # noqa: E501 - quoted as printed
        "CHECKPOINT_WRITE_FAILURE",
        "checkpoint_write_failure",
        (),
        None,
    ),
    # https://github.com/huggingface/transformers/issues/9732
    ("OSError: [Errno 116] Stale file handle", "FILESYSTEM", "filesystem_stale_handle", (), None),
    # https://github.com/sabeechen/hassio-google-drive-backup/issues/301
    (
        "OSError: [Errno 30] Read-only file system: '/data/stop_addon_state.json'",
        "FILESYSTEM",
        "filesystem_read_only",
        (),
        None,
    ),
    # https://github.com/dansuh17/segan-pytorch/issues/19
    ("OSError: [Errno 5] Input/output error", "FILESYSTEM", "filesystem_io_error", (), None),
    # https://github.com/NVIDIA/nccl/issues/1405 (IB completion status 12, named by the [host:pid] prefix)
    (
        "kp-ddp-worker-0:3468:3905 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from peer 10.216.210.236<54862> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid fd00:1148:9000:5000:4:200:3:ff22 remoteGidsfd00:1148:9000:5000:4:200:3:ff1f",  # noqa: E501 - quoted as printed
        "NCCL_ERROR",
        "nccl_error",
        ("kp-ddp-worker-0",),
        None,
    ),
]


@pytest.mark.parametrize("line,category,rule,nodes,xid", CRASHES)
def test_real_crash_lines(line, category, rule, nodes, xid):
    found = C.crash(line)
    assert isinstance(found, CrashSignature), line
    assert (found.category, found.rule, found.nodes, found.xid) == (category, rule, nodes, xid)


BENIGN = [
    # https://github.com/bigscience-workshop/Megatron-DeepSpeed/issues/396: counters at zero
    " iteration     5426/  250000 | consumed samples:        43408 | learning rate: 2.999E-04 | loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 | samples per second: 1.886 | TFLOPs: 78.46 |",  # noqa: E501 - quoted as printed
    # https://github.com/epfLLM/Megatron-LLM/pull/34: a skipped bad step that training survives
    "***WARNING*** Bad grad_norm detected (grad_norm=nan)",
    # https://github.com/hpcaitech/ColossalAI/issues/3514: the launcher tearing down the other ranks
    "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 812914 closing signal SIGTERM",
    # https://github.com/leptonai/gpud nvidia-smi -q on a healthy GPU
    "        Remapping Failure Occurred        : No",
    "        Volatile Uncorrectable ECC : 0",
]


@pytest.mark.parametrize("line", BENIGN)
def test_look_alikes_are_not_crashes(line):
    assert C.crash(line) is None


# (line, kind, iteration)
CHECKPOINTS = [
    # https://github.com/hiyouga/LlamaFactory/issues/1813
    (
        "[INFO|trainer.py:1791] 2023-12-12 10:12:06,000 >>   Continuing training from global step 200000",
        "loaded",
        200000,
    ),
    # https://github.com/zai-org/ChatGLM-6B/issues/1166 (HF checkpoint-N directory, DeepSpeed global_stepN)
    (
        "[2023-06-02 00:34:14,470] [INFO] [logging.py:96:log_dist] [Rank 0] Saving model checkpoint: ./output/deepspeed/checkpoint-1428/global_step1428/zero_pp_rank_0_mp_rank_00_model_states.pt",  # noqa: E501 - quoted as printed
        "saved",
        1428,
    ),
    # https://github.com/innnky/so-vits-svc/issues/46
    ("INFO:32k:Saving model and optimizer state at iteration 55 to ./logs\\32k\\G_5000.pth", "saved", 55),
    # NeMo 2 / Megatron-Bridge capitalise it (https://github.com/NVIDIA-NeMo/Megatron-Bridge/pull/5738)
    ("Successfully saved checkpoint from iteration 1000 to /checkpoints/iter_0001000", "saved", 1000),
    ("Saving model checkpoint to /out/checkpoint-500", "saved", 500),
]


@pytest.mark.parametrize("line,kind,iteration", CHECKPOINTS)
def test_checkpoint_lines_carry_their_iteration(line, kind, iteration):
    found = C.checkpoint(line)
    assert isinstance(found, CheckpointEvent), line
    assert (found.kind, found.iteration) == (kind, iteration)


# Lines found in i12a's corpus (tests/fixtures/realworld), with that corpus's source for each.
MORE_CRASHES = [
    # https://github.com/marius-team/marius/issues/80
    (
        "/pytorch/aten/src/ATen/native/cuda/Loss.cu:455: nll_loss_backward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [12,0,0] Assertion `t >= 0 && t < n_classes` failed.",  # noqa: E501 - quoted as printed
        "CUDA_ERROR",
        "cuda_kernel_assert",
        (),
    ),
    # https://github.com/pytorch/pytorch/issues/131755
    (
        "n122-164-108:7400:7642 [1] include/alloc.h:125 NCCL WARN Cuda failure 700 'an illegal memory access was encountered'",  # noqa: E501 - quoted as printed
        "CUDA_ERROR",
        "nccl_cuda_failure",
        (),
    ),
    # https://github.com/huggingface/accelerate/issues/2246
    (
        "qgpu2018:59522:59993 [0] init.cc:795 NCCL WARN Duplicate GPU detected : rank 6 and rank 4 both on CUDA device 31000",  # noqa: E501 - quoted as printed
        "NCCL_ERROR",
        "nccl_duplicate_gpu",
        ("qgpu2018",),  # named, yet not blamed: a duplicate GPU is the launch configuration (outlook application)
    ),
    # https://github.com/scitix/sichek/issues/51
    (
        "[Sun Jan 11 09:52:01 2026] NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062) returned from status @ kernel_channel.c:2874",  # noqa: E501 - quoted as printed
        "XID",
        "gpu_reset_required",
        (),
    ),
    # https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1045 (the syslog host field names the node)
    (
        "Jun 12 16:25:44 fedora-box kernel: GSP task watchdog timeout @ pc:0x1b3e756, partition:4#0, task:3",
        "XID",
        "gpu_gsp_timeout",
        ("fedora-box",),
    ),
    # https://github.com/leptonai/gpud/pull/80 (nvidia-smi -q, Remapped Rows section)
    ("        Uncorrectable Error               : 4", "XID", "gpu_remapped_rows_uncorrectable", ()),
    # https://github.com/ai4d-iasc/trixie/issues/58
    (
        "srun: error: Task launch for 36.0 failed on node cn131: Job credential expired",
        "NODE_FAIL",
        "srun_task_launch_failed",
        ("cn131",),
    ),
    # https://github.com/nicolasj92/ai-on-sagemaker-hyperpod (slurmctld log, resiliency guide)
    (
        "[2024-03-08T00:15:18.986] update_node: node ip-10-1-73-87 state set to FAIL",
        "NODE_FAIL",
        "slurmctld_node_failed",
        ("ip-10-1-73-87",),
    ),
    # https://github.com/AICrossSim/NewComputeBench (torchtitan pretraining guide)
    ("[rank0]:Fatal Python error: Aborted", "SEGFAULT", "fatal_abort", ()),
    # https://github.com/Lightning-AI/lit-llama/issues/380 (anonymised host kept as the source wrote it)
    (
        "...-48:34050:34121 [0] transport/net_ib.cc:93 NCCL WARN NET/IB : Got async event : port error",
        "NCCL_ERROR",
        "nccl_error",
        ("...-48",),
    ),
]


@pytest.mark.parametrize("line,category,rule,nodes", MORE_CRASHES)
def test_more_real_crash_lines(line, category, rule, nodes):
    found = C.crash(line)
    assert isinstance(found, CrashSignature), line
    assert (found.category, found.rule, found.nodes) == (category, rule, nodes)


SHELL = [
    # https://github.com/ArjunaCluster/ArjunaUsers/issues/52 (bash reports the OOM killer's SIGKILL)
    (
        "/var/spool/slurmd/job00191/slurm_script: line 28:  8156 Killed                  python3 main.py --prop hform",
        "HOST_OOM",
        "shell_killed",
    ),
    # https://github.com/xk-huang/yet-another-vectornet/issues/37
    ("Killed", "HOST_OOM", "shell_killed"),
    # https://github.com/pytorch/pytorch/issues/585
    ("Bus error (core dumped)", "SEGFAULT", "shell_core_dumped"),
    # https://github.com/hezhangsprinter/DCPDN/issues/12
    (
        "RuntimeError: DataLoader worker (pid 19597) is killed by signal: Killed.",
        "HOST_OOM",
        "dataloader_worker_killed",
    ),
    # https://github.com/OpenRLHF/OpenRLHF/issues/1040
    (
        "torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for clients. 1/3 clients joined.",
        "NCCL_TIMEOUT",
        "dist_store_timeout",
    ),
]


@pytest.mark.parametrize("line,category,rule", SHELL)
def test_the_shells_signal_lines(line, category, rule):
    found = C.crash(line)
    assert isinstance(found, CrashSignature), line
    assert (found.category, found.rule) == (category, rule)


MORE_BENIGN = [
    # https://github.com/zai-org/ImageReward/issues/65: NCCL skips a device and carries on
    "65826-86bd789679-2dxbs:80746:80746 [3] transport/net_ib.cc:149 NCCL WARN NET/IB : Unable to open device mlx5_59",
    # https://github.com/haydenjohnson94/HuangSeedFund_Evo2: a dynamo warning that quotes a traceback
    "[rank0]:W0618 21:57:02.561000 1489278 torch/_dynamo/convert_frame.py:1277] Traceback (most recent call last):",
]


@pytest.mark.parametrize("line", MORE_BENIGN)
def test_more_look_alikes(line):
    assert C.crash(line) is None


MORE_CHECKPOINTS = [
    # https://github.com/ROCm/rocm-blogs (megablocks README): newer Megatron says "at iteration"
    (
        "successfully saved checkpoint at iteration    2000 to /megablocks/third_party/Stanford-Megatron-LM/checkpoints",  # noqa: E501 - quoted as printed
        "saved",
        2000,
    ),
    # https://github.com/haydenjohnson94/HuangSeedFund_Evo2 (NeMo 2)
    (
        "[NeMo I 2025-06-18 21:57:05 nemo_logging:393] Global Checkpoint Save : Rank: 0 : Iteration: 4 : Start time: 1750309024.990s : Save duration: 0.217s",  # noqa: E501 - quoted as printed
        "saved",
        4,
    ),
    # https://github.com/InternLM/xtuner/issues/1034
    ("05/11 14:58:00 - mmengine - INFO - Resume checkpoint from /root/train/lora_output/iter_300.pth", "loaded", 300),
    # https://github.com/AICrossSim/NewComputeBench
    ("[rank0]:2025-04-01 00:25:54,090 - root - INFO - Saving a full checkpoint at last step, step 644.", "saved", 644),
]


@pytest.mark.parametrize("line,kind,iteration", MORE_CHECKPOINTS)
def test_more_checkpoint_lines(line, kind, iteration):
    found = C.checkpoint(line)
    assert isinstance(found, CheckpointEvent), line
    assert (found.kind, found.iteration) == (kind, iteration)
