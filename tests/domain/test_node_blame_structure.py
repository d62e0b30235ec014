"""Node blame and judgment by structure on real lines the detectors had not seen (issue 24): NCCL fabric errors,
Ray's ways of naming a dead node, preemption, NVLink faults, a start-of-training line, a helper step, a failed
resume. Every line is read from a corpus file (named in each test; the source URL is in that corpus's labels)."""

from pathlib import Path

import pytest

from app.authoring.log_check import build_report
from app.domain.decision import rootcause as rc
from app.domain.decision.rootcause import Finding
from app.domain.detection import line_nodes as ln
from app.domain.detection.line_facts import helper_step_exit
from app.domain.detection.progress import parse_step
from app.domain.detection.rules_builtin import default_ruleset
from app.domain.detection.signatures import NCCL_ERROR, NODE_FAIL, XID, Classifier

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RULES = default_ruleset()
CLASSIFIER = Classifier(RULES)


def lines(corpus: str, name: str) -> list[str]:
    return (FIXTURES / corpus / name).read_text(encoding="utf-8").splitlines()


def report(corpus: str, name: str) -> dict:
    return build_report(str(FIXTURES / corpus / name), RULES)


def blamed(data: dict) -> list[str]:
    return [entry["node"] for entry in data["blamed_nodes"]]


def test_an_ib_completion_error_without_a_space_before_the_colon_is_a_crash_naming_its_host() -> None:
    # scitix/sichek#44: NCCL 2.2x prints "NET/IB: Got completion ..." behind a "[date time] " prefix
    text = lines("realworld-holdout5", "nccl-ib-completion-pod-host-001.log")[0]
    found = CLASSIFIER.crash(text)
    assert found is not None and found.category == NCCL_ERROR
    host = "test-ys-512-scaling-test-0104-1504-a7de2925-master-0"
    assert found.nodes == (host,)
    data = report("realworld-holdout5", "nccl-ib-completion-pod-host-001.log")
    assert (data["primary_category"], data["outlook"], blamed(data)) == (NCCL_ERROR, rc.INFRASTRUCTURE, [host])


def test_a_fabric_error_is_infrastructure_even_when_its_host_is_not_named() -> None:
    # nccl-ib-completion-error-004.log: the host field of the prefix is empty (":522:622 [2] ...")
    text = lines("realworld", "nccl-ib-completion-error-004.log")[0]
    finding = ln.with_line_nodes(Finding(category=NCCL_ERROR, rule="nccl_error", line=text))
    assert finding.nodes == ()
    assert rc.outlook_of_finding(finding) == rc.INFRASTRUCTURE
    assert rc.attribute(finding).blamed == ()  # nothing to exclude, but still not the program's fault


def test_a_failed_verbs_call_is_no_fabric_fault_and_blames_no_node() -> None:
    # nccl-ibv-error-001.log: "Call to ibv_create_cq failed" on spark01 (an RDMA resource/config problem)
    text = lines("realworld", "nccl-ibv-error-001.log")[12]
    finding = ln.with_line_nodes(Finding(category=NCCL_ERROR, rule="nccl_error", line=text))
    assert finding.nodes == ("spark01",)
    assert not rc.fabric_line(text)
    assert rc.outlook_of_finding(finding) == rc.TRANSIENT and rc.attribute(finding).blamed == ()


def test_a_fabric_line_blames_its_host_even_when_the_finding_s_outlook_is_not_infrastructure() -> None:
    # the same IB completion line, as a rule with another outlook would see it (an operator's rule, a future
    # RULE_OUTLOOK entry): the host the fabric line names is still blamed
    text = lines("realworld-holdout5", "nccl-ib-completion-pod-host-001.log")[0]
    finding = ln.with_line_nodes(Finding(category=NCCL_ERROR, rule="nccl_error", line=text))
    rc.RULE_OUTLOOK["nccl_error"] = rc.TRANSIENT
    try:
        assert rc.outlook_of_finding(finding) == rc.TRANSIENT
        assert [b.node for b in rc.attribute(finding).blamed] == [finding.nodes[0]]
    finally:
        del rc.RULE_OUTLOOK["nccl_error"]


@pytest.mark.parametrize(
    ("corpus", "name", "number", "node"),
    [
        # ray-project/ray#59193: "... and address: <ip> and node name: <ip> has been marked dead ..."
        ("realworld-holdout5", "ray-train-node-dead-address-name-001.log", 1, "192.168.10.175"),
        # ray-project/kuberay#3827: the GCS event's '"ip":"..."' field
        ("realworld-holdout5", "kuberay-gcs-node-removed-event-001.log", 1, "156.176.0.154"),
        # hiyouga/EasyR1#324: "Owner Ip address: 172.21.160.9 ... Owner's node has crashed."
        ("realworld-holdout3", "verl-easyr1-owner-node-crashed-001.log", None, "172.21.160.9"),
    ],
)
def test_ray_names_a_dead_node_by_its_address_fields(corpus, name, number, node) -> None:
    text = lines(corpus, name)
    subject = text[number - 1] if number else next(t for t in text if "Owner Ip address" in t)
    found = CLASSIFIER.crash(subject)
    assert found is not None and found.category == NODE_FAIL
    assert node in ln.nodes_in_line(subject)
    assert node in blamed(report(corpus, name))


@pytest.mark.parametrize(
    "text",
    [
        # tensorflow-tpu / torch lines that carry "address" without naming a node
        "RuntimeError: The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).",
        "Node IP: 127.0.0.1",  # loopback is never a node (ray-project/ray#58638 prints it on one machine)
    ],
)
def test_address_words_that_are_no_node_address_name_no_node(text) -> None:
    assert [n for n in ln.nodes_in_line(text) if n != "127.0.0.1"] == []
    assert ln.with_line_nodes(Finding(category=NODE_FAIL, rule="node_lost", line=text)).nodes == ()


def test_the_ip_of_ray_s_actor_block_names_the_node_its_closing_line_does_not() -> None:
    # ray-project/ray#43751: "\tip: 10.72.56.3" then "The actor is dead because its node has died."
    text = lines("realworld-holdout3", "ray-train-actor-node-died-001.log")
    closing = next(i for i, t in enumerate(text) if "its node has died" in t)
    assert ln.actor_block_node(text[:closing]) == "10.72.56.3"
    assert ln.actor_block_node(text[: closing - 7]) is None  # above the block: no field lines
    data = report("realworld-holdout3", "ray-train-actor-node-died-001.log")
    assert (data["primary_category"], blamed(data)) == (NODE_FAIL, ["10.72.56.3"])


def test_a_node_loss_the_text_calls_a_preemption_is_transient_and_blames_no_node() -> None:
    # ray-project/ray#63807: "its node has died" then "the actor's node was preempted: <drain reason>"
    text = lines("realworld-holdout5", "ray-train-actor-node-preempted-001.log")
    notice = CLASSIFIER.crash(text[7])
    assert notice is not None and notice.rule == "instance_termination_notice"
    data = report("realworld-holdout5", "ray-train-actor-node-preempted-001.log")
    assert (data["primary_category"], data["outlook"], blamed(data)) == (NODE_FAIL, rc.TRANSIENT, [])
    # without the notice the same loss is a faulty node
    lost = Finding(category=NODE_FAIL, rule="node_lost", line=text[6], nodes=("10.0.0.9",), order=7)
    assert rc.analyse([lost]).outlook == rc.INFRASTRUCTURE
    preempted = Finding(category=NODE_FAIL, rule="instance_termination_notice", line=text[7], order=8)
    cause = rc.analyse([lost, preempted])
    assert (cause.outlook, cause.blamed) == (rc.TRANSIENT, ())


def test_an_nvlink_driver_failure_is_a_gpu_fault_of_the_journal_s_host() -> None:
    # leptonai/gpud#1271
    text = lines("realworld-holdout5", "nvidia-nvlink-postrx-linkmask-host-001.log")[0]
    found = CLASSIFIER.crash(text)
    assert found is not None and (found.category, found.rule, found.nodes) == (
        XID,
        "gpu_nvlink_failure",
        ("pool0-0082",),
    )


@pytest.mark.parametrize(
    ("corpus", "name", "contains"),
    [
        ("realworld-holdout4", "torchtitan-load-checkpoint-at-step-001.log", "Training starts at step"),
        ("realworld-holdout4", "torchtitan-load-checkpoint-at-step-001.log", "gradient accumulation steps"),
    ],
)
def test_where_training_will_start_and_step_counts_in_settings_are_no_step_taken(corpus, name, contains) -> None:
    text = next(t for t in lines(corpus, name) if contains in t)
    assert parse_step(text) is None


def test_counters_next_to_the_words_still_count() -> None:
    # mmdetection#7932 (an mmcv Epoch line) and the torchtitan step line format stay progress
    epoch = lines("realworld-holdout5", "benign-mmdet-solo-epoch-host-progress-001.log")[2]
    reading = parse_step(epoch)
    assert reading is not None and reading.strong
    assert parse_step("step: 10  loss:  7.9123  memory: 30.12GiB(38.06%)") is not None


def test_an_srun_helper_step_run_inside_a_command_substitution_is_no_crash() -> None:
    # MLPerf Training v4.0 logs: "++ srun --ntasks=1 ... mlperf-sysjson.sh" exits 1 over a metadata value
    for corpus, name in (
        ("realworld", "benign-mlperf-sysjson-helper-exit-001.log"),
        ("realworld-holdout3", "benign-mlperf-sysjson-helper-exit-002.log"),
    ):
        text = lines(corpus, name)
        exit_at = next(i for i, t in enumerate(text) if t.startswith("srun: error:"))
        assert helper_step_exit(text[exit_at], reversed(text[:exit_at]))
        assert not helper_step_exit(text[exit_at], [])  # no traced command above: srun's exit counts
        assert report(corpus, name)["crashed"] is False


def test_a_failed_resume_names_the_checkpoint_it_tried_to_load() -> None:
    # Haochen-Wang409/ross#13: HF Trainer's DeepSpeed resume fails on checkpoint-5439
    text = lines("realworld-holdout4", "transformers-deepspeed-failed-resume-001.log")
    event = CLASSIFIER.checkpoint(text[-1])
    assert event is not None and (event.kind, event.iteration) == ("loaded", 5439)
    assert CLASSIFIER.checkpoint(text[-2]) is None  # the `raise ValueError(f"...")` source line quoted above it


def test_a_crash_line_that_names_a_failed_resume_records_the_crash_and_the_load_attempt() -> None:
    # the same file read whole: the exception line (its traceback header is cut off above) is one crash and one load
    data = report("realworld-holdout4", "transformers-deepspeed-failed-resume-001.log")
    assert data["crashed"] and data["primary_category"] == "PYTHON_TRACEBACK"
    assert [(c["kind"], c["iteration"]) for c in data["checkpoints"]] == [("loaded", 5439)]
