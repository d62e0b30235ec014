"""Root cause across ranks (real torchrun/gloo output), fingerprints that survive reruns, nodes from the allocation.

Every log line here is quoted from a real capture (tests/fixtures/torchrun/, made in the lab with torch
2.13.0+cpu) or from the public source named next to it; none is written by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.authoring.log_check import build_report
from app.domain.decision import rootcause as rc
from app.domain.decision.rootcause import Finding
from app.domain.detection import line_nodes as ln
from app.domain.detection.rules_builtin import default_ruleset
from app.domain.detection.signatures import Classifier

TORCHRUN = Path(__file__).resolve().parent.parent / "fixtures" / "torchrun"
C = Classifier(default_ruleset())


def line_of(name: str, needle: str) -> str:
    """The first line of a capture that contains `needle` (so the test quotes the file, not a copy)."""
    return next(line for line in (TORCHRUN / name).read_text(encoding="utf-8").splitlines() if needle in line)


def finding(line: str, order: int, *, detail: str = "") -> Finding:
    signal = C.crash(line)
    assert signal is not None, line
    return Finding(
        category=signal.category,
        rule=signal.rule,
        line=line,
        detail=detail or signal.detail,
        nodes=signal.nodes,
        rank=signal.rank,
        order=order,
    )


GLOO_RESET = line_of("ddp-kill.log", "Connection reset by peer")
GLOO_CLOSED = line_of("ddp-raise.log", "Connection closed by peer")
SIGKILL_FAILED = line_of("ddp-kill.log", "failed (exitcode: -9)")
SIGKILL_BLOCK = line_of("ddp-kill.log", "exitcode  : -9")
SRUN_TERMINATED = line_of("ddp-kill.log", "srun: error: node1: task 0: Terminated")
SRUN_EXITED = line_of("ddp-kill.log", "srun: error: node2: task 1: Exited with exit code 1")
STEP_CANCELLED = line_of("ddp-kill.log", "CANCELLED AT")
SHAPES = line_of("ddp-raise.log", "[rank0]: RuntimeError: mat1 and mat2")
SHAPES_IN_BLOCK = line_of("ddp-raise.log", "  RuntimeError: mat1 and mat2")
# https://github.com/NVIDIA/nvidia-resiliency-ext/issues/18: the elastic agent's SIGTERM to a survivor
SIGTERM = "torch.distributed.elastic.multiprocessing.api.SignalException: Process 293812 got signal: 15"
# https://github.com/RVC-Project/Retrieval-based-Voice-Conversion-WebUI/issues/1882 (a later gloo build)
GLOO_RESET_OTHER = (
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:589] Read error [192.168.70.92]:25266: "
    "Connection reset by peer"
)


def test_the_sigkilled_rank_wins_over_the_survivors_gloo_error() -> None:
    survivor = finding("[rank0]: Traceback (most recent call last):", 10, detail=GLOO_RESET)
    killed = finding(SIGKILL_FAILED, 28)
    block = Finding(**{**finding(SIGKILL_BLOCK, 58).__dict__, "rank": 1})
    terminated = finding(SRUN_TERMINATED, 148)
    assert rc.known_consequence(survivor) and rc.known_consequence(terminated)
    assert not rc.known_consequence(killed)
    cause = rc.analyse([survivor, killed, block, terminated], attempt_nodes=("node1", "node2"))
    # the block says the same as `failed (exitcode: -9)` about the same PID, and names the rank
    assert cause.primary is block and cause.category == "HOST_OOM"
    assert survivor in cause.consequences


def test_known_consequences_never_win_over_an_application_error() -> None:
    shapes = finding("[rank0]: Traceback (most recent call last):", 10, detail=SHAPES)
    peer = finding("[rank1]: Traceback (most recent call last):", 5, detail=GLOO_CLOSED)  # read earlier
    sigterm = finding("Traceback (most recent call last):", 1, detail=SIGTERM)
    assert rc.tier_of(peer) == rc.tier_of(sigterm) == rc.TIER_KNOWN_CONSEQUENCE
    assert rc.primary([peer, sigterm, shapes]) is shapes


def test_only_consequences_still_name_one() -> None:
    """When nothing else was printed, the earliest consequence is all there is (it is never hidden)."""
    terminated = finding(SRUN_TERMINATED, 3)
    sigterm = finding("Traceback (most recent call last):", 2, detail=SIGTERM)
    assert rc.primary([terminated, sigterm]) is sigterm


@pytest.mark.parametrize(
    "capture,category,node,rank,text",
    [
        ("ddp-kill.log", "HOST_OOM", "node2", 1, "exitcode  : -9"),  # rank 1 SIGKILLed on node2
        ("ddp-raise.log", "PYTHON_TRACEBACK", "node2", 0, "[rank0]: Traceback"),  # rank 0 ran on node2
        # with Recovery acting, srun's first `Exited with exit code 1` is the survivor's (node1): not used
        ("ddp-kill-recovered.log", "HOST_OOM", "node2", 0, "exitcode  : -9"),
        # nodes with host names of their own: torchrun's block says `host : node2`
        ("ddp-kill-hostnames.log", "HOST_OOM", "node2", 1, "exitcode  : -9"),
        # a DataLoader worker's exception re-raised in the rank: the worker's original traceback is the cause
        ("ddp-loader-recovered.log", "PYTHON_TRACEBACK", "node2", 1, "[rank1]: Original Traceback"),
    ],
)
def test_check_log_names_the_process_that_failed_first(capture, category, node, rank, text) -> None:
    report = build_report(str(TORCHRUN / capture), default_ruleset(), attempt_nodes=("node1", "node2"))
    root = report["root_cause"]
    assert (report["primary_category"], root["node"], root["rank"]) == (category, node, rank)
    assert text in root["text"]
    roles = {entry["role"] for entry in report["crash_signatures"]}
    assert "known consequence" in roles and "primary" in roles


def test_the_two_gloo_messages_for_one_cause_have_one_fingerprint() -> None:
    assert GLOO_RESET != GLOO_CLOSED
    fingerprints = {rc.fingerprint("PYTHON_TRACEBACK", text) for text in (GLOO_RESET, GLOO_CLOSED, GLOO_RESET_OTHER)}
    assert fingerprints == {"PYTHON_TRACEBACK: gloo: connection to a peer lost"}


def test_different_causes_have_different_fingerprints() -> None:
    prints = {
        rc.fingerprint("PYTHON_TRACEBACK", GLOO_RESET),
        rc.fingerprint("PYTHON_TRACEBACK", SHAPES),
        rc.fingerprint("HOST_OOM", SIGKILL_BLOCK),
        rc.fingerprint("PYTHON_TRACEBACK", SIGTERM),
    }
    assert len(prints) == 4
    assert rc.fingerprint("PYTHON_TRACEBACK", SHAPES) != rc.fingerprint("CUDA_ERROR", SHAPES)


def test_a_rerun_prints_the_same_failure_with_other_volatile_parts() -> None:
    """The rank prefix, glog prefix, PIDs, ports and addresses change between runs; the fingerprint does not."""
    assert rc.fingerprint("PYTHON_TRACEBACK", SHAPES) == rc.fingerprint("PYTHON_TRACEBACK", SHAPES_IN_BLOCK)
    assert rc.normalise_origin(SHAPES) == "RuntimeError: mat1 and mat2 shapes cannot be multiplied (16x31 and 32x64)"
    normalised = rc.normalise_origin(SIGKILL_FAILED)
    assert normalised.startswith("failed (exitcode: -9) local_rank: <n> (pid <n>) of binary: ")
    assert "E1205" not in normalised and "3832" not in normalised
    # another run of the same SIGKILL in the lab (with Recovery acting): other time, agent PID, PID
    other_run = line_of("ddp-kill-recovered.log", "failed (exitcode: -9)")
    assert other_run != SIGKILL_FAILED
    assert rc.fingerprint_id(rc.fingerprint("HOST_OOM", SIGKILL_FAILED)) == rc.fingerprint_id(
        rc.fingerprint("HOST_OOM", other_run)
    )


def test_the_same_place_compares_fingerprints() -> None:
    a, b = rc.fingerprint("PYTHON_TRACEBACK", GLOO_RESET), rc.fingerprint("PYTHON_TRACEBACK", GLOO_CLOSED)
    assert rc.same_place(a, 6, b, 6)


@pytest.mark.parametrize(
    "line,allocation,nodes",
    [
        (STEP_CANCELLED, ("node1", "node2"), ("node1",)),
        (SRUN_EXITED, ("node1", "node2"), ("node2",)),
        # https://github.com/NVIDIA/nccl/issues (the built-in nccl_error rule's example): NCCL's host:pid:tid prefix
        (
            "node7:12345:12399 [3] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer",
            (),
            ("node7",),
        ),
        # fully qualified allocation, short name in the line, any case
        (STEP_CANCELLED, ("NODE1.cluster.example", "node2.cluster.example"), ("NODE1.cluster.example",)),
        # torchrun's failure block (tests/fixtures/realworld/accelerate-elastic-sigkill-001.log)
        (
            "  host      : mlxlab115rp2n7682d40d9-20250521025625-6dyyd3-8nir8b-worker",
            (),
            ("mlxlab115rp2n7682d40d9-20250521025625-6dyyd3-8nir8b-worker",),
        ),
        (line_of("ddp-kill.log", "host      : localhost"), ("node1", "node2"), ()),  # the lab's shared hostname
        ("iteration 6 | loss 9.6726 | grad norm 8.062 | lr 5.00E-02 | step time 0.207 s", ("node1",), ()),
    ],
)
def test_nodes_a_line_names(line, allocation, nodes) -> None:
    assert tuple(n for n in ln.nodes_in_line(line, allocation) if n.lower() != "localhost") == nodes


def test_with_line_nodes_maps_the_signature_node_onto_the_allocation() -> None:
    f = finding(SRUN_EXITED, 1)
    assert ln.with_line_nodes(f, ("node1.c", "node2.c")).nodes == ("node2.c",)
    block_host = Finding(category="HOST_OOM", rule="torch_elastic_sigkill", line=SIGKILL_BLOCK, nodes=("localhost",))
    assert ln.with_line_nodes(block_host, ("node1", "node2")).nodes == ()


def test_the_failed_node_comes_from_srun_s_first_non_zero_exit() -> None:
    block = Finding(**{**finding(SIGKILL_BLOCK, 58).__dict__, "rank": 1})
    exited, terminated = finding(SRUN_EXITED, 99), finding(SRUN_TERMINATED, 148)
    cause = rc.analyse([block, exited, terminated])
    assert (cause.node, cause.node_from) == ("node2", "srun: task 1 was the first to exit with an error")
    assert rc.analyse([block, terminated]).node is None  # Terminated is what srun did to the others


def test_srun_s_exit_order_after_recovery_acted_names_no_node() -> None:
    # ddp-kill-recovered.log: Recovery's requeue-hold ended the killed rank's task (node2: `Terminated`) before
    # its launcher exited, so the survivor's `node1: task 0: Exited with exit code 1` came first
    block = Finding(**{**finding(line_of("ddp-kill-recovered.log", "exitcode  : -9"), 59).__dict__, "rank": 0})
    exited = finding(line_of("ddp-kill-recovered.log", "node1: task 0: Exited with exit code 1"), 100)
    assert rc.analyse([block], node_hints=[exited]).node is None


def test_the_launcher_s_report_of_the_same_rank_names_the_node() -> None:
    # the failed rank's traceback names no node; torchrun's report of that rank (rank : 1, host : node2) does,
    # even when printed after Recovery acted
    traceback = Finding(category="PYTHON_TRACEBACK", rule="python_traceback", line="[rank1]: Traceback", rank=1)
    report = Finding(category="PYTHON_TRACEBACK", rule="x", line="  traceback : ...", rank=1, nodes=("node2",))
    other = Finding(category="PYTHON_TRACEBACK", rule="x", line="  traceback : ...", rank=0, nodes=("node1",))
    cause = rc.analyse([traceback], node_hints=[other, report])
    assert (cause.node, cause.node_from) == ("node2", "the launcher's report of rank 1 names its host")


def test_launcher_block_facts() -> None:
    text = (TORCHRUN / "ddp-kill.log").read_text(encoding="utf-8").splitlines()
    index = next(i for i, line in enumerate(text) if "exitcode  : -9" in line)
    assert ln.launcher_block_facts(text[:index]) == (1, "localhost")


def test_decided_anomaly_prefers_the_root_cause() -> None:
    assert rc.decided_anomaly(["anomaly:7", "root_cause:anomaly:3"]) == 3
    assert rc.decided_anomaly(["attempt_state:1:FAILED", "anomaly:9"]) == 9
    assert rc.decided_anomaly(["attempt_state:1:FAILED"]) is None
    # refs accumulate over an Advice's generations: the newest root cause is the one decided on
    assert rc.decided_anomaly(["anomaly:1", "root_cause:anomaly:2", "anomaly:4", "root_cause:anomaly:4"]) == 4


def test_lines_naming_the_failed_pid_or_rank_say_its_node_nearest_first() -> None:
    text = (TORCHRUN / "ddp-kill-recovered.log").read_text(encoding="utf-8").splitlines()
    index = next(i for i, line in enumerate(text) if "exitcode  : -9" in line)
    pid = ln.process_id(text[index])
    assert pid == "25024"
    [startup] = ln.lines_naming_pid(text[:index], pid)
    assert startup.startswith("rank 0/2 on node2")
    assert ln.lines_naming_rank(text[:index], 0)[0].strip() == "rank      : 0 (local_rank: 0)"  # the block's own
    assert ln.lines_naming_rank(text[:index], 0)[-1].startswith("rank 0/2 on node2")
    assert not any(line.startswith("[rank0]:") for line in ln.lines_naming_rank(text[:index], 0))
    block = Finding(category="HOST_OOM", rule="torch_elastic_sigkill", line=text[index], nodes=("localhost",), rank=0)
    assert ln.with_line_nodes(block, ("node1", "node2"), context=[startup]).nodes == ("node2",)
    assert ln.with_line_nodes(block, (), context=[startup]).nodes == ()  # without the allocation: no guess


def test_paths_under_the_job_s_directories_do_not_make_a_failure_different() -> None:
    here = rc.normalise_origin(SIGKILL_FAILED, job_dirs=("/var/cache/recovery-lab/torch-venv",))
    assert here.endswith("of binary: <job>/bin/python")
    elsewhere = SIGKILL_FAILED.replace("/var/cache/recovery-lab/torch-venv", "/scratch/run-2/venv")
    assert rc.normalise_origin(elsewhere, job_dirs=("/scratch/run-2/venv",)) == here


def test_a_re_raise_ranks_below_the_original_exception_it_carries() -> None:
    caught = finding(
        "[rank1]: Traceback (most recent call last):",
        1,
        detail="[rank1]: ValueError: Caught ValueError in DataLoader worker process 0.",
    )
    original = finding(
        "[rank1]: Original Traceback (most recent call last):",
        2,
        detail="[rank1]: ValueError: sample 2 of shard-0004.tar is corrupt",
    )
    assert rc.reraised(caught) and not rc.reraised(original)
    assert rc.primary([caught, original]) is original
    assert rc.primary([caught]) is caught  # the original not read (yet): the re-raise still names the failure
