"""Merged stacks and the judgment of the rank that held the others back (app/domain/detection/stacks.py)."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.domain.detection import stacks
from app.domain.detection.stacks import Frame, RankStack

BACKWARD = (
    Frame("_engine_run_backward", "/venv/lib/python3.11/site-packages/torch/autograd/graph.py", 825),
    Frame("backward", "/venv/lib/python3.11/site-packages/torch/autograd/__init__.py", 347),
    Frame("main", "/work/examples/ddp_train.py", 150),
    Frame("wrapper", "/venv/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py"),
)


def peer(rank: int, node: str) -> RankStack:
    return RankStack(rank=rank, node=node, pid=100 + rank, state="S", wchan="do_sys_poll", frames=BACKWARD)


def outlier(state: str = "S", wchan: str = "hrtimer_nanosleep", func: str = "main", **extra: object) -> RankStack:
    frames = (
        Frame(func, "/work/examples/ddp_train.py", 141),
        Frame("wrapper", "/venv/site-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py", 355),
    )
    return RankStack(rank=1, node="node-b", pid=201, state=state, wchan=wchan, frames=frames, **extra)  # type: ignore[arg-type]


def test_identical_stacks_are_grouped_with_their_ranks_and_the_outlier_marked() -> None:
    ranks = [peer(0, "node-a"), outlier(), peer(2, "node-c"), peer(3, "node-c")]
    groups = stacks.merge(ranks, ["rank 1"])
    assert [(g.ranks, g.outlier) for g in groups] == [(("rank 0", "rank 2", "rank 3"), False), (("rank 1",), True)]
    assert groups[0].nodes == ("node-a", "node-c")
    assert stacks.merged_text(groups) == (
        "ranks 0, 2, 3: _engine_run_backward in autograd/graph.py:825; rank 1: main in ddp_train.py:141"
    )


def test_a_rank_sleeping_in_its_own_python_is_an_application_outlier() -> None:
    judged = stacks.judge([peer(0, "node-a"), outlier()])
    assert judged is not None
    assert (judged.rank, judged.node, judged.outlook, judged.blame_node) == (1, "node-b", "application", False)
    assert judged.where == "main in ddp_train.py:141"
    assert judged.sentence.startswith("rank 1 on node-b held the others back: main in ddp_train.py:141")
    assert "rank 0 waited in a collective (_engine_run_backward in autograd/graph.py:825)" in judged.sentence


@pytest.mark.parametrize(
    ("rank", "outlook", "blamed", "why"),
    [
        (outlier(state="D", wchan="folio_wait_bit_common"), "infrastructure", True, "uninterruptible"),
        (outlier(state="S", wchan="uvm_wait_for_fence"), "infrastructure", True, "driver"),
        (outlier(state="S", wchan="pipe_read"), "infrastructure", True, "I/O"),
        (outlier(state="S", wchan="wait_for_partner"), "infrastructure", True, "I/O"),
        (outlier(state="T", wchan="do_signal_stop"), "transient", False, "stopped"),
        (outlier(state="S", thread_states=("S", "D")), "infrastructure", True, "uninterruptible"),
    ],
)
def test_where_the_outlier_is_stuck_decides_the_outlook(rank: RankStack, outlook: str, blamed: bool, why: str) -> None:
    judged = stacks.judge([peer(0, "node-a"), rank, peer(2, "node-c")])
    assert judged is not None
    assert (judged.outlook, judged.blame_node) == (outlook, blamed)
    assert why in judged.why


def test_no_outlier_when_every_rank_waits_or_none_does() -> None:
    assert stacks.judge([peer(0, "a"), peer(1, "b")]) is None
    assert stacks.judge([outlier(), RankStack(rank=0, node="a", pid=1, state="S", frames=outlier().frames)]) is None
    assert stacks.judge([peer(0, "a")]) is None  # one rank: nothing to compare


def test_the_launcher_frame_below_main_is_not_a_collective() -> None:
    assert not stacks.in_collective(outlier())
    assert stacks.in_collective(peer(0, "a"))


def test_flight_recorder_positions_name_the_rank_behind() -> None:
    ranks = [
        RankStack(rank=0, node="a", pid=1, state="S", flight_seq=42),
        RankStack(rank=1, node="b", pid=2, state="S", flight_seq=41),
        RankStack(rank=2, node="c", pid=3, state="S", flight_seq=42),
    ]
    judged = stacks.judge(ranks)
    assert judged is not None and (judged.rank, judged.node) == (1, "b")
    assert "collective #41 vs #42" in judged.sentence


def test_a_flight_record_is_read_as_plain_data_only() -> None:
    record = {
        "version": "2.4",
        "entries": [
            {"collective_seq_id": 7, "state": "completed", "profiling_name": "nccl:all_reduce"},
            {"collective_seq_id": 8, "state": "started", "profiling_name": "nccl:all_reduce"},
            {"collective_seq_id": 9, "state": "scheduled", "profiling_name": "nccl:broadcast"},
        ],
    }
    read, why = stacks.read_flight_record(pickle.dumps(record))
    assert why is None and read is not None
    assert stacks.flight_position(read) == (8, "nccl:all_reduce")


class Boom:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("echo pwned > /dev/null",))


def test_a_flight_record_with_a_callable_is_refused_not_run() -> None:
    read, why = stacks.read_flight_record(pickle.dumps({"entries": [Boom()]}))
    assert read is None and why is not None and "refused" in why
    assert stacks.read_flight_record(b"not a pickle")[0] is None
    assert stacks.read_flight_record(pickle.dumps([1, 2]))[1] == "not read: a list, not a dict"


PROGRAM = """
import os, sys, time
def wait_here(mode):
    if mode == "fifo":
        open(sys.argv[2], "rb").read()
    else:
        time.sleep(60)
print("ready", flush=True)
wait_here(sys.argv[1])
"""


def _pyspy() -> str:
    path = Path(sys.executable).parent / "py-spy"
    if not path.exists():
        pytest.skip("py-spy is in the test extra; not installed here")
    return str(path)


@pytest.mark.parametrize("mode", ["sleep", "fifo", "sigstop"])
def test_real_pyspy_dump_parses_to_the_waiting_frame(mode: str, tmp_path: Path) -> None:
    """A real process, a real py-spy --nonblocking dump: the parsed main thread's innermost frame is `wait_here`."""
    pyspy = _pyspy()
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    proc = subprocess.Popen([sys.executable, "-c", PROGRAM, mode, str(fifo)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(0.3)
        if mode == "sigstop":
            os.kill(proc.pid, signal.SIGSTOP)
            time.sleep(0.2)
        dump = subprocess.run(
            [pyspy, "dump", "--nonblocking", "--pid", str(proc.pid)], capture_output=True, text=True, timeout=30
        )
        assert dump.returncode == 0, dump.stderr
        threads = stacks.parse_pyspy(dump.stdout)
        frames = stacks.main_frames(threads, proc.pid)
        assert frames and frames[0].func == "wait_here" and frames[0].file == "<string>", dump.stdout
        assert frames[1].func == "<module>"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def test_the_story_and_the_advice_reason_say_what_the_stacks_showed() -> None:
    from app.domain.decision.advice import Failure, describe_failure
    from app.domain.decision.retry import FailureKind
    from app.domain.presentation.story import AnomalyFact, AttemptFacts, tell

    judged = stacks.judge([peer(0, "node-a"), outlier(state="D", wchan="nfs_wait_bit_killable")])
    assert judged is not None
    facts = AttemptFacts(
        attempt_index=0,
        state="RUNNING",
        anomaly=AnomalyFact(kind="NO_PROGRESS", category="NO_OUTPUT_TRAININGLOOP"),
        stacks=judged.sentence,
    )
    assert "(stacks: rank 1 on node-b held the others back: main in ddp_train.py:141" in tell(facts).happened
    failure = Failure(attempt_index=0, kind=FailureKind.NO_PROGRESS, stack_note=judged.sentence)
    assert describe_failure(failure).endswith(f"(stacks: {judged.sentence})")
