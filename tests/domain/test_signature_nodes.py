"""Structural root-cause rules on real lines: a node that went away, a fabric fault, torchrun's Root Cause entry,
and the run-to-run parts a fingerprint drops. Every line is read from a corpus file (named in each test)."""

from pathlib import Path

import pytest

from app.authoring.log_check import build_report
from app.domain.decision import rootcause as rc
from app.domain.decision.rootcause import Finding
from app.domain.detection import line_nodes as ln
from app.domain.detection.rules_builtin import default_ruleset
from app.domain.detection.signatures import NODE_FAIL, XID, Classifier

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REALWORLD = FIXTURES / "realworld"
RULES = default_ruleset()
CLASSIFIER = Classifier(RULES)


def line(name: str, number: int) -> str:
    """Line `number` (1-based) of a tuning-corpus file."""
    return (REALWORLD / name).read_text(encoding="utf-8").splitlines()[number - 1]


@pytest.mark.parametrize(
    ("name", "number", "rule", "category", "nodes"),
    [
        # https://github.com/AMDResearch/hpcfund/issues/69
        ("slurm-prolog-failure-001.log", 1, "scheduler_prolog_failure", NODE_FAIL, ("k003-006",)),
        # https://github.com/ray-project/ray/issues/3628 (a client ID, no host)
        ("ray-node-marked-dead-003.log", 1, "node_lost", NODE_FAIL, ()),
        # https://github.com/megagonlabs/t5-japanese/issues/1
        ("tensorflow-tpu-lame-worker-001.log", 12, "lame_workers", NODE_FAIL, ()),
        # https://github.com/mozilla/translations/issues/964
        ("gcp-spot-preemption-001.log", 1, "instance_termination_notice", NODE_FAIL, ()),
        # https://github.com/E3SM-Project/E3SM/issues/8699
        ("mpich-cuda-devices-unavailable-001.log", 1, "gpu_devices_unavailable", XID, ()),
    ],
)
def test_a_node_that_went_away_is_recognised_by_structure(name, number, rule, category, nodes) -> None:
    found = CLASSIFIER.crash(line(name, number))
    assert found is not None
    assert (found.rule, found.category, found.nodes) == (rule, category, nodes)


def test_a_termination_notice_is_transient_and_a_lost_node_is_infrastructure() -> None:
    assert rc.outlook_of(category=NODE_FAIL, rule="instance_termination_notice") == rc.TRANSIENT
    assert rc.outlook_of(category=NODE_FAIL, rule="node_lost") == rc.INFRASTRUCTURE
    assert rc.outlook_of(category=XID, rule="gpu_devices_unavailable") == rc.INFRASTRUCTURE


@pytest.mark.parametrize(
    "text",
    [
        "ray.exceptions.WorkerCrashedError: The worker died unexpectedly while executing this task.",  # a process
        "heartbeat timeout: 30 (node is not responding after this many seconds)",  # a setting
        "--preemptible=true",
        "NCCL INFO NET/IB : No device found.",
    ],
)
def test_prose_and_settings_about_nodes_are_not_a_lost_node(text) -> None:
    found = CLASSIFIER.crash(text)
    assert found is None or found.category != NODE_FAIL


def test_a_lost_node_before_the_traceback_it_causes_is_the_root_cause() -> None:
    # ray-node-marked-dead-003.log: the node is marked dead (line 1), the driver's RayGetError traceback follows
    report = build_report(str(REALWORLD / "ray-node-marked-dead-003.log"), RULES)
    assert (report["primary_category"], report["outlook"]) == (NODE_FAIL, rc.INFRASTRUCTURE)
    assert report["root_cause"]["line"] == 1


def test_an_nccl_fabric_fault_is_a_cause_not_a_consequence() -> None:
    # https://github.com/NVIDIA/nccl-tests/issues/24 (nccl-ib-completion-error-003.log): IB completion errors on
    # both hosts' proxy threads, then a CUDA failure on gpu5; the RDMA path between the two hosts is the cause.
    ib = Finding(category="NCCL_ERROR", rule="nccl_error", line=line("nccl-ib-completion-error-003.log", 1), order=1)
    ib = ln.with_line_nodes(ib, ("gpu4", "gpu5"))
    cuda = Finding(category="CUDA_ERROR", rule="nccl_cuda_failure", line=line("nccl-ib-completion-error-003.log", 13))
    cuda = ln.with_line_nodes(Finding(**{**cuda.__dict__, "order": 13}), ("gpu4", "gpu5"))
    assert rc.fabric_fault(ib) and not rc.fabric_fault(cuda)
    cause = rc.analyse([ib, cuda], attempt_nodes=("gpu4", "gpu5"))
    assert cause.primary is ib and cause.outlook == rc.INFRASTRUCTURE
    assert [b.node for b in cause.blamed] == ["gpu5"]
    # a plain NCCL error without a fabric word stays a consequence of the CUDA failure
    plain = Finding(category="NCCL_ERROR", rule="nccl_error", line="NCCL error: unhandled system error", order=1)
    assert rc.analyse([plain, cuda]).primary is cuda


def test_torchrun_s_root_cause_entry_wins_over_the_failures_listed_above_it() -> None:
    # pytorch-elastic-sigbus-001.log: every local rank got SIGBUS; torchrun lists ranks 6 and 7 under "Failures:"
    # and rank 0 under "Root Cause (first observed failure):"
    text = (REALWORLD / "pytorch-elastic-sigbus-001.log").read_text(encoding="utf-8").splitlines()
    entries = [i for i, t in enumerate(text) if t.lstrip().startswith("exitcode")]
    assert [ln.under_root_cause_head(text[:i]) for i in entries] == [False, False, True]
    report = build_report(str(REALWORLD / "pytorch-elastic-sigbus-001.log"), RULES)
    assert (report["rank"], report["root_cause"]["node"]) == (0, "lexun-1")


def test_the_torchrun_lab_log_keeps_its_killed_rank_as_root_cause() -> None:
    # tests/fixtures/torchrun/ddp-kill.log (real torchrun + gloo): one entry only, under Root Cause
    report = build_report(str(FIXTURES / "torchrun" / "ddp-kill.log"), RULES, attempt_nodes=("node1", "node2"))
    assert (report["primary_category"], report["rank"], report["root_cause"]["node"]) == ("HOST_OOM", 1, "node2")


def test_a_rerun_s_memory_figures_durations_and_sequence_numbers_do_not_change_the_fingerprint() -> None:
    # pytorch-nccl-watchdog: two ranks' watchdog lines of one run differ in elapsed time and op; a rerun's SeqNum
    # restarts after the resume
    name = next(p.name for p in sorted(REALWORLD.glob("*.log")) if "SeqNum=80078" in p.read_text("utf-8"))
    watchdog = next(t for t in (REALWORLD / name).read_text("utf-8").splitlines() if "ran for 600026" in t)
    rerun = watchdog.replace("SeqNum=80078", "SeqNum=1203").replace("600026 milliseconds", "600031 milliseconds")
    assert rc.fingerprint("NCCL_TIMEOUT", watchdog) == rc.fingerprint("NCCL_TIMEOUT", rerun)
    assert "<duration>" in rc.normalise_origin(watchdog) and "SeqNum=<n>" in rc.normalise_origin(watchdog)
    # a CUDA OOM: free and held memory differ from run to run
    oom = next(
        t
        for p in sorted(REALWORLD.glob("*.log"))
        for t in p.read_text("utf-8").splitlines()
        if "CUDA out of memory. Tried to allocate" in t and "GiB" in t
    )
    assert "<size>" in rc.normalise_origin(oom)
    assert not any(ch.isdigit() for ch in rc.normalise_origin(oom).split("Tried to allocate")[1].split(".")[0])


def test_a_traceback_logged_at_warning_level_is_not_a_crash() -> None:
    # tests/fixtures/torch-small/wont-convert-warning.log (real torch 2.13 run): dynamo logs the backend's
    # exception with its traceback under glog's W prefix and goes on; the program prints its iterations and ends
    path = FIXTURES / "torch-small" / "wont-convert-warning.log"
    text = path.read_text(encoding="utf-8").splitlines()
    assert any(t.startswith("W1205") and t.endswith("Traceback (most recent call last):") for t in text)
    report = build_report(str(path), RULES)
    assert report["crashed"] is False and report["crash_signatures"] == []
    # the same traceback line without the warning prefix (as an uncaught exception prints it) is still a crash
    logged = next(t for t in text if t.endswith("Traceback (most recent call last):"))
    found = CLASSIFIER.crash(logged.split("] ", 1)[1])
    assert found is not None and found.category == "PYTHON_TRACEBACK"
    assert CLASSIFIER.crash(logged) is None


@pytest.mark.parametrize(
    ("text", "allocation", "nodes"),
    [
        # https://github.com/AMDResearch/hpcfund/issues/69 (slurm-prolog-failure-001.log)
        (line("slurm-prolog-failure-001.log", 1), (), ("k003-006",)),
        # slurm-task-launch-failed-001.log: "failed on node cn131"
        (line("slurm-task-launch-failed-001.log", 1), (), ("cn131",)),
        # the same against a fully qualified allocation, any case
        (line("slurm-task-launch-failed-001.log", 1), ("CN131.cluster", "cn132.cluster"), ("CN131.cluster",)),
        # accelerate-nccl-socket-error-001.log: NCCL's prefix names the node, the peer is named by its IB interface
        (line("accelerate-nccl-socket-error-001.log", 5), ("qgpu2017", "qgpu2018"), ("qgpu2017",)),
        (
            line("accelerate-nccl-socket-error-001.log", 5).replace("qgpu2017-ib0", "qgpu2018-ib0"),
            ("qgpu2017", "qgpu2018"),
            ("qgpu2017", "qgpu2018"),
        ),
        # other-nccl-internal-error-001.log line 4: Ray names the node by address; an EC2-style node list spells it
        # (the line names two actors' addresses, .15 and .18)
        (line("other-nccl-internal-error-001.log", 4), ("ip-10-58-226-15", "ip-10-58-226-99"), ("ip-10-58-226-15",)),
        (line("other-nccl-internal-error-001.log", 4), (), ("10.58.226.15", "10.58.226.18")),  # no list: address
        # prose: a word after "on node" is a host only when it has a digit
        ("srun: error: Unable to create step on node failure", (), ()),
    ],
)
def test_prose_host_fields_name_a_node(text, allocation, nodes) -> None:
    assert ln.nodes_in_line(text, allocation) == nodes


@pytest.mark.parametrize("name", ["store-timeout-clients.log", "store-timeout-get.log", "store-timeout-pg.log"])
def test_a_c10d_store_timeout_is_a_transient_collective_timeout(name) -> None:
    # tests/fixtures/torch-small/store-timeout-*.log: real TCPStore / init_process_group timeouts (torch 2.13)
    report = build_report(str(FIXTURES / "torch-small" / name), RULES)
    assert (report["primary_category"], report["outlook"]) == ("NCCL_TIMEOUT", rc.TRANSIENT)


def test_two_store_timeouts_after_different_waits_have_one_fingerprint() -> None:
    # the same DistStoreError after 3 s (a bare TCPStore) and after 4 s (init_process_group's store)
    ids = {
        build_report(str(FIXTURES / "torch-small" / name), RULES)["root_cause"]["fingerprint_id"]
        for name in ("store-timeout-clients.log", "store-timeout-pg.log")
    }
    assert len(ids) == 1
    other = build_report(str(FIXTURES / "torch-small" / "store-timeout-get.log"), RULES)["root_cause"]
    assert other["fingerprint_id"] not in ids


def test_dates_epochs_and_slurm_ids_of_a_rerun_do_not_change_the_fingerprint() -> None:
    # mpich-cuda-devices-unavailable-001.log line 2 (ctime date, Slurm job id), gcp-spot-preemption-001.log line 1
    # (syslog date, a Z time, a slashed date), slurm-preemption-001.log line 1 (JOB id, ISO time)
    for name, number in (
        ("mpich-cuda-devices-unavailable-001.log", 2),
        ("gcp-spot-preemption-001.log", 1),
        ("slurm-preemption-001.log", 1),
    ):
        text = line(name, number)
        normalised = rc.normalise_origin(text)
        assert not any(part in normalised for part in ("2026", "2024", "2021", "16:03", "57638547", "32391783"))
    mpich = line("mpich-cuda-devices-unavailable-001.log", 2)
    rerun = mpich.replace("57638547.0", "57700012.0").replace("Fri Aug 28 22:45:13 2026", "Sat Aug 29 03:12:40 2026")
    assert rc.fingerprint("XID", mpich) == rc.fingerprint("XID", rerun)
    assert "[nid004069]" in rc.normalise_origin(mpich)  # a node name is kept: it is not a time


@pytest.mark.parametrize(
    ("text", "category"),
    [
        # https://github.com/pytorch/pytorch/issues/175431 (ROCm): the accelerator's own name before "out of memory"
        ("HIP out of memory. Tried to allocate 2.00 MiB. GPU 7 has a total capacity of 287.98 GiB", "CUDA_OOM"),
        # megatron-nccl-system-error-001.log line 7: older PyTorch spells it "NCCL Error 2"
        (line("megatron-nccl-system-error-001.log", 7), "NCCL_ERROR"),
        # ray-tune-slurm-oom-001.log line 5 / swift-checkpoint-rename-race-001.log line 6: an exception class line
        # whose traceback the excerpt lost is still an uncaught exception
        (line("ray-tune-slurm-oom-001.log", 5), "PYTHON_TRACEBACK"),
        (line("swift-checkpoint-rename-race-001.log", 6), "PYTHON_TRACEBACK"),
    ],
)
def test_categories_by_structure(text, category) -> None:
    found = CLASSIFIER.crash(text)
    assert found is not None and found.category == category


@pytest.mark.parametrize(
    "text",
    [
        "    raise ValueError: not at the start of a line",  # code, indented
        "Note: ValueError: is raised when the input is empty",  # prose
        "UserWarning: something is deprecated",
    ],
)
def test_an_exception_class_only_counts_at_the_start_of_a_line(text) -> None:
    found = CLASSIFIER.crash(text)
    assert found is None or found.rule != "python_exception_class_line"


@pytest.mark.parametrize(
    ("name", "number", "rule", "category", "nodes"),
    [
        # https://github.com/NVIDIA/open-gpu-kernel-modules/issues/688 (journald: the host field before "kernel:")
        ("nvidia-driver-gpu-lost-assert-001.log", 5, "gpu_fallen_off_bus", XID, ("abggdna-DGX-Station-A100",)),
        # https://github.com/deepspeedai/Megatron-DeepSpeed/pull/14 (an announced exit, no traceback)
        (
            "megatron-deepspeed-load-optimizer-exit-001.log",
            3,
            "announced_exit_after_failed_load",
            "PYTHON_TRACEBACK",
            (),
        ),
    ],
)
def test_a_lost_gpu_and_an_announced_exit_are_crashes(name, number, rule, category, nodes) -> None:
    found = CLASSIFIER.crash(line(name, number))
    assert found is not None
    assert (found.rule, found.category, found.nodes) == (rule, category, nodes)


@pytest.mark.parametrize(
    ("name", "number", "allocation", "nodes"),
    [
        # https://github.com/NVIDIA/nccl/issues/1710: the NCCL host prefix inside a markdown quote ("> node201:...")
        ("nccl-ib-async-wq-error-001.log", 1, (), ("node201",)),
        # BigScience Jean Zay README: "Connect to PEER<port> failed" names the peer, not the reporting host r11i6n2
        ("nccl-connect-refused-node-001.log", 1, (), ("10.148.3.247",)),
        ("nccl-connect-refused-node-001.log", 1, ("r11i6n2", "ip-10-148-3-247"), ("ip-10-148-3-247",)),
        ("nccl-connect-refused-node-001.log", 1, ("r11i6n2", "r10i6n5"), ()),
    ],
)
def test_nodes_a_quoted_nccl_line_and_a_failed_connect_name(name, number, allocation, nodes) -> None:
    assert ln.nodes_in_line(line(name, number), allocation) == nodes
