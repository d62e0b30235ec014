"""Root cause: outlook per category, blamed nodes with provenance, the primary of a cascade, "the same failure"."""

import datetime as dt

import pytest

from app.domain.decision import rootcause as rc
from app.domain.decision.rootcause import Finding


def f(category: str, rule: str, order: int, **kw) -> Finding:
    return Finding(category=category, rule=rule, order=order, **kw)


@pytest.mark.parametrize(
    "category,rule,line,nodes,xid,outlook",
    [
        ("XID", "nvidia_xid", "", (), 79, rc.INFRASTRUCTURE),
        ("XID", "nvidia_xid", "", (), 13, rc.APPLICATION),  # graphics engine exception: the program
        ("NODE_FAIL", "slurm_node_failure", "", ("node3",), None, rc.INFRASTRUCTURE),
        ("NODE_FAIL", "slurm_preempted", "", (), None, rc.TRANSIENT),
        ("NCCL_TIMEOUT", "nccl_watchdog_timeout", "", (), None, rc.TRANSIENT),
        (
            "NCCL_ERROR",
            "nccl_error",
            "n7:1:2 [0] NCCL WARN NET/IB : Got completion from peer",
            ("n7",),
            None,
            rc.INFRASTRUCTURE,
        ),
        (
            "NCCL_ERROR",
            "nccl_error",
            "NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error",
            (),
            None,
            rc.TRANSIENT,
        ),
        ("FILESYSTEM", "filesystem_no_space", "", (), None, rc.APPLICATION),
        # https://github.com/facebookresearch/ParlAI/issues/3084: NCCL refusing the call, not the fabric
        (
            "NCCL_ERROR",
            "nccl_error",
            "RuntimeError: NCCL error in: NCCLUtils.hpp:82, invalid argument",
            (),
            None,
            rc.APPLICATION,
        ),
        ("FILESYSTEM", "python_traceback:filesystem_stale_handle", "", (), None, rc.TRANSIENT),
        ("PYTHON_TRACEBACK", "python_traceback", "", (), None, rc.APPLICATION),
        ("CUDA_OOM", "python_traceback:cuda_oom", "", (), None, rc.APPLICATION),
        ("MY_SITE_CATEGORY", "app_fatal", "", (), None, rc.TRANSIENT),
    ],
)
def test_outlook(category, rule, line, nodes, xid, outlook):
    assert rc.outlook_of(category=category, rule=rule, line=line, nodes=nodes, xid=xid) == outlook


def test_only_infrastructure_evidence_blames_a_node():
    value_error = f("PYTHON_TRACEBACK", "python_traceback", 1, nodes=("node7",), detail="ValueError: bad")
    assert rc.attribute(value_error, attempt_nodes=("node7",)).blamed == ()
    xid = f("XID", "nvidia_xid", 1, nodes=("node12",), xid=79)
    assert rc.attribute(xid, attempt_nodes=("node1", "node12")).blamed == (rc.BlamedNode("node12", rc.FROM_LINE),)


def test_a_hostless_xid_on_a_single_node_attempt_blames_the_allocation():
    xid = f("XID", "nvidia_xid", 1, xid=79)
    [blamed] = rc.attribute(xid, attempt_nodes=("node2",)).blamed
    assert (blamed.node, blamed.provenance) == ("node2", rc.FROM_ALLOCATION)
    assert rc.attribute(xid, attempt_nodes=()).blamed == ()  # allocation unknown: nobody is blamed


def test_a_rank_is_mapped_through_the_task_layout_or_says_the_layout_is_unknown():
    xid = f("XID", "nvidia_xid", 1, xid=79, rank=5)
    [blamed] = rc.attribute(xid, attempt_nodes=("a", "b"), tasks_per_node="4(x2)").blamed
    assert (blamed.node, blamed.provenance) == ("b", rc.FROM_RANK) and "rank 5" in blamed.detail
    unknown = rc.attribute(xid, attempt_nodes=("a", "b"))
    assert unknown.blamed == () and unknown.note is not None and "layout unknown" in unknown.note


@pytest.mark.parametrize(
    "value,counts",
    [("4(x2)", (4, 4)), ("3,2(x2)", (3, 2, 2)), ("8", (8,)), ("", None), ("x", None), (None, None)],
)
def test_tasks_per_node(value, counts):
    assert rc.parse_tasks_per_node(value) == counts


def test_node_of_rank_block_distribution():
    assert [rc.node_of_rank(r, ("a", "b", "c"), "3,2(x2)") for r in range(8)] == [
        "a",
        "a",
        "a",
        "b",
        "b",
        "c",
        "c",
        None,
    ]
    assert rc.node_of_rank(0, ("a", "b"), "4") is None  # layout does not fit the node list


def test_primary_is_the_earliest_specific_cause_not_the_last_line():
    # A CUDA error on rank 3, then NCCL watchdogs on the others, the launcher summary, srun's kill line.
    cascade = [
        f("NCCL_TIMEOUT", "nccl_watchdog_timeout", 1, rank=0),
        f("CUDA_ERROR", "python_traceback:cuda_error", 2, rank=3),
        f("NCCL_ERROR", "nccl_error", 3),
        f("SEGFAULT", "torch_elastic_failed_signal", 4),
        f("PYTHON_TRACEBACK", "srun_task_exited", 5, nodes=("node1",)),
    ]
    cause = rc.analyse(cascade, attempt_nodes=("node1", "node2"))
    assert cause.category == "CUDA_ERROR" and cause.outlook == rc.APPLICATION
    assert len(cause.consequences) == 4 and cause.blamed == ()


def test_source_time_orders_before_reading_order_when_both_lines_have_one():
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    later_in_file = f("XID", "nvidia_xid", 9, xid=79, source_time=t0)
    earlier_in_file = f("CUDA_ERROR", "cuda_error", 1, source_time=t0 + dt.timedelta(seconds=5))
    assert rc.primary([earlier_in_file, later_in_file]) is later_in_file


def test_a_signal_summary_beats_a_generic_one():
    summary = [
        f("PYTHON_TRACEBACK", "torch_elastic_failed", 1),
        f(
            "PYTHON_TRACEBACK",
            "python_traceback",
            2,
            detail="torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        ),
        f("HOST_OOM", "torch_elastic_sigkill", 3, line="  exitcode  : -9 (pid: 14750)"),
    ]
    assert rc.primary(summary).category == "HOST_OOM"


def test_the_errno_beats_the_checkpoint_write_failure_it_explains():
    lines = [
        f("CHECKPOINT_WRITE_FAILURE", "checkpoint_write_failure", 1),
        f("FILESYSTEM", "python_traceback:filesystem_no_space", 2),
    ]
    assert rc.primary(lines).category == "FILESYSTEM"


def test_failure_signature_ignores_rank_prefix_pids_and_addresses():
    a = rc.failure_signature("PYTHON_TRACEBACK", "[rank0]: ValueError: bad batch at 0x7f00aa (pid: 12)")
    b = rc.failure_signature("PYTHON_TRACEBACK", "[rank3]: ValueError: bad batch at 0x7f11bb (pid: 99)")
    assert a == b and a.startswith("PYTHON_TRACEBACK: ValueError: bad batch")
    assert a != rc.failure_signature("PYTHON_TRACEBACK", "ValueError: another message")


@pytest.mark.parametrize(
    "iteration,earlier,same",
    [(500, 500, True), (503, 500, True), (506, 500, False), (None, None, True), (None, 500, True), (6, None, True)],
)
def test_same_place(iteration, earlier, same):
    assert rc.same_place("X: e", iteration, "X: e", earlier) is same
    assert rc.same_place("X: e", iteration, "X: other", earlier) is False
