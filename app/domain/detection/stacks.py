"""Why a job hung, from the stacks of its ranks: merge identical stacks, find the rank that held the others back.

Input is what the node probe (app/evidence/stack_probe.py) reported per process: its rank, node, state (R/S/D/T)
and wait channel, and py-spy's `dump` text; optionally each rank's NCCL flight-recorder position. The judgment:
peers waiting in a collective and one rank elsewhere is the outlier. Stuck in a driver/CUDA/NCCL frame or in
uninterruptible I/O, its node is blamed (outlook infrastructure); stuck in the program's own Python, the outlook
is application; stopped by a signal (state T), neither the node nor the program is blamed (transient).
"""

from __future__ import annotations

import io
import pickle
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

INFRASTRUCTURE = "infrastructure"
APPLICATION = "application"
TRANSIENT = "transient"
PROVENANCE = "stack"

MAX_FRAMES = 64  # frames kept per thread

_THREAD = re.compile(r'^Thread (?P<id>0x[0-9a-fA-F]+|\d+) \((?P<status>[^)]*)\)(?:: "(?P<name>[^"]*)")?')
_FRAME = re.compile(r"^\s+(?P<func>.+?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)\s*$")
# A frame that is a collective or waits for one: torch.distributed, DDP's gradient all-reduce in autograd.
_COLLECTIVE_FILE = re.compile(r"torch/distributed/|torch/nn/parallel/|torch/autograd/|deepspeed/comm|megatron/core/")
_COLLECTIVE_FUNC = re.compile(
    r"all_reduce|allreduce|all_gather|allgather|reduce_scatter|broadcast|barrier|all_to_all|alltoall|"
    r"_engine_run_backward|monitored_barrier",
    re.I,
)
_LAUNCHER_FILE = re.compile(r"torch/distributed/elastic/|torch/distributed/run\.py")
# Native or kernel places that mean the driver, CUDA or NCCL itself is stuck.
_DRIVER = re.compile(r"nvidia|\bnv_|uvm_|cuda|libcuda|nccl|\bib_|mlx5|rdma|os_schedule|nvkm", re.I)
# Wait channels of a blocked read or open (a pipe/FIFO, a network filesystem, the page cache, a disk).
_IO_WCHAN = re.compile(
    r"pipe_read|pipe_wait|wait_for_partner|fifo_open|nfs|rpc_|io_schedule|folio_wait|wait_on_page|"
    r"__lock_page|lustre|ll_|ptlrpc|fuse_|blk_|bit_wait_io|jbd2|ext4|xfs",
    re.I,
)
_IO_FUNC = re.compile(r"^(read|readinto|readline|readlines|open|_io\.|recv_into|load|read_bytes|read_text)", re.I)


@dataclass(frozen=True)
class Frame:
    """One Python (or native) frame as py-spy prints it."""

    func: str
    file: str
    line: int | None = None

    @property
    def where(self) -> str:
        """`func` in `file:line` with the file's last two path parts."""
        short = "/".join(self.file.split("/")[-2:]) if "site-packages" in self.file else self.file.split("/")[-1]
        return f"{self.func} in {short}" + (f":{self.line}" if self.line is not None else "")

    def to_json(self) -> dict[str, Any]:
        return {"func": self.func, "file": self.file, "line": self.line}


@dataclass(frozen=True)
class Thread:
    """One thread of a process: its id, py-spy's status and name, frames innermost first."""

    ident: str
    status: str
    name: str
    frames: tuple[Frame, ...]


def parse_pyspy(text: str) -> list[Thread]:
    """The threads of py-spy `dump` text (unknown lines are skipped: the text comes from the job's node)."""
    threads: list[Thread] = []
    current: dict[str, Any] | None = None
    for raw in text.splitlines():
        head = _THREAD.match(raw)
        if head:
            if current is not None:
                threads.append(Thread(**current))
            current = {"ident": head["id"], "status": head["status"], "name": head["name"] or "", "frames": ()}
            continue
        frame = _FRAME.match(raw)
        if frame and current is not None and len(current["frames"]) < MAX_FRAMES:
            line = int(frame["line"]) if frame["line"] else None
            current["frames"] = (*current["frames"], Frame(frame["func"].strip(), frame["file"].strip(), line))
    if current is not None:
        threads.append(Thread(**current))
    return threads


@dataclass(frozen=True)
class RankStack:
    """What the probe saw of one rank: where it runs, its state, wait channel and main thread's frames."""

    rank: int | None
    node: str
    pid: int
    state: str = ""
    wchan: str = ""
    frames: tuple[Frame, ...] = ()
    threads: int = 0
    error: str | None = None
    thread_states: tuple[str, ...] = ()  # the state of every thread (a D-state worker thread counts)
    flight_seq: int | None = None  # the last collective sequence number the flight recorder shows started

    @property
    def label(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else f"pid {self.pid}"

    @property
    def top(self) -> Frame | None:
        return self.frames[0] if self.frames else None

    @property
    def signature(self) -> tuple[Any, ...]:
        """What makes two ranks' stacks the same: their frames (without the program's file paths' prefixes)."""
        return tuple((f.func, f.file.split("/")[-1], f.line) for f in self.frames) or (("state", self.state),)


def main_frames(threads: Sequence[Thread], pid: int) -> tuple[Frame, ...]:
    """The main thread's frames: the thread whose id is the pid, else the one named MainThread, else the first."""
    for thread in threads:
        if thread.ident == str(pid) or thread.name == "MainThread":
            return thread.frames
    return threads[0].frames if threads else ()


def in_collective(stack: RankStack) -> bool:
    """Whether the rank waits in (or inside) a collective."""
    return any(
        not _LAUNCHER_FILE.search(f.file) and (_COLLECTIVE_FILE.search(f.file) or _COLLECTIVE_FUNC.search(f.func))
        for f in stack.frames[:2]
    )


@dataclass(frozen=True)
class StackGroup:
    """Ranks whose stacks are identical, and where they are."""

    ranks: tuple[str, ...]
    nodes: tuple[str, ...]
    where: str
    state: str
    wchan: str
    frames: tuple[Frame, ...]
    outlier: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "ranks": list(self.ranks),
            "nodes": list(self.nodes),
            "where": self.where,
            "state": self.state,
            "wchan": self.wchan,
            "frames": [f.to_json() for f in self.frames],
            "outlier": self.outlier,
        }


def describe(stack: RankStack) -> str:
    """Where one rank is: its innermost frame, else its state."""
    if stack.top is not None:
        return stack.top.where
    if stack.error:
        return f"no stack ({stack.error})"
    return f"state {stack.state or '?'}" + (f", {stack.wchan}" if stack.wchan else "")


def merge(stacks: Sequence[RankStack], outliers: Iterable[str] = ()) -> list[StackGroup]:
    """Identical stacks grouped with their rank list, the largest group first; `outliers` (labels) are marked."""
    marked = set(outliers)
    groups: dict[tuple[Any, ...], list[RankStack]] = {}
    for stack in sorted(stacks, key=lambda s: (s.rank if s.rank is not None else 1 << 30, s.pid)):
        groups.setdefault(stack.signature, []).append(stack)
    out = [
        StackGroup(
            ranks=tuple(s.label for s in members),
            nodes=tuple(dict.fromkeys(s.node for s in members)),
            where=describe(members[0]),
            state="".join(sorted({s.state for s in members if s.state})),
            wchan=", ".join(sorted({s.wchan for s in members if s.wchan})),
            frames=members[0].frames,
            outlier=any(s.label in marked for s in members),
        )
        for members in groups.values()
    ]
    return sorted(out, key=lambda g: (g.outlier, -len(g.ranks)))


def merged_text(groups: Sequence[StackGroup]) -> str:
    """One line: "ranks 0, 2: `x` in `a.py:1`; rank 1: `y` in `b.py:2`"."""
    parts = []
    for group in groups:
        numbers = [r.removeprefix("rank ") for r in group.ranks]
        who = (
            ("ranks " if len(numbers) > 1 else "rank ") + ", ".join(numbers)
            if all(r.startswith("rank ") for r in group.ranks)
            else ", ".join(group.ranks)
        )
        parts.append(f"{who}: {group.where}")
    return "; ".join(parts)


@dataclass(frozen=True)
class Judgment:
    """The rank that held the others back, where, and what follows for the retry."""

    rank: int | None
    node: str
    where: str
    why: str
    outlook: str
    blame_node: bool
    sentence: str
    peers: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "node": self.node,
            "where": self.where,
            "why": self.why,
            "outlook": self.outlook,
            "blameNode": self.blame_node,
            "sentence": self.sentence,
            "peerRanks": list(self.peers),  # never "peers": that key holds node names (worker/advisor.py)
        }


def classify(stack: RankStack) -> tuple[str, str, bool]:
    """(why, outlook, blame its node) for a rank that is not where its peers are."""
    native = " ".join([stack.wchan, *(f"{f.func} {f.file}" for f in stack.frames[:8])])
    states = {stack.state, *stack.thread_states}
    if "D" in states:
        return f"uninterruptible wait (state D{', ' + stack.wchan if stack.wchan else ''})", INFRASTRUCTURE, True
    if _DRIVER.search(native):
        return f"stuck in a driver/CUDA/NCCL frame ({stack.wchan or describe(stack)})", INFRASTRUCTURE, True
    if stack.state in {"T", "t"}:
        return "stopped by a signal (state T: SIGSTOP or a debugger)", TRANSIENT, False
    if stack.wchan and _IO_WCHAN.search(stack.wchan):
        return f"blocked in I/O (state {stack.state}, {stack.wchan})", INFRASTRUCTURE, True
    if stack.top is not None and _IO_FUNC.search(stack.top.func) and stack.state == "D":
        return "blocked in I/O", INFRASTRUCTURE, True
    detail = f"state {stack.state}" + (f", {stack.wchan}" if stack.wchan else "")
    return f"in the program's own Python code ({detail})", APPLICATION, False


def judge(stacks: Sequence[RankStack]) -> Judgment | None:
    """The outlier when its peers wait in a collective (or the flight recorder shows it behind), else None."""
    ranks = [s for s in stacks if s.rank is not None]
    if len(ranks) < 2:
        return None
    waiting = [s for s in ranks if in_collective(s)]
    others = [s for s in ranks if s not in waiting]
    reason = "while {peers} waited in a collective ({where})"
    if not waiting or not others:
        behind = _flight_outlier(ranks)
        if behind is None:
            return None
        others = [behind]
        waiting = [s for s in ranks if s is not behind]
        reason = "the flight recorder shows it behind {peers} (collective #{seq} vs #{ahead})"
    outlier = others[0]
    why, outlook, blame = classify(outlier)
    peers = tuple(s.label for s in waiting)
    peer_text = _rank_list(waiting)
    ahead = max((s.flight_seq for s in waiting if s.flight_seq is not None), default=None)
    context = reason.format(peers=peer_text, where=describe(waiting[0]), seq=outlier.flight_seq, ahead=ahead)
    extra = f" (also elsewhere: {', '.join(s.label for s in others[1:])})" if len(others) > 1 else ""
    sentence = f"{outlier.label} on {outlier.node} held the others back: {describe(outlier)}, {why}, {context}{extra}"
    return Judgment(outlier.rank, outlier.node, describe(outlier), why, outlook, blame, sentence, peers)


def _rank_list(stacks: Sequence[RankStack]) -> str:
    numbers = [str(s.rank) for s in stacks]
    return ("ranks " if len(numbers) > 1 else "rank ") + ", ".join(numbers)


def _flight_outlier(ranks: Sequence[RankStack]) -> RankStack | None:
    """The one rank whose flight recorder is behind every other rank's (all ranks have a position)."""
    if any(s.flight_seq is None for s in ranks):
        return None
    lowest = min(s.flight_seq for s in ranks if s.flight_seq is not None)
    behind = [s for s in ranks if s.flight_seq == lowest]
    return behind[0] if len(behind) == 1 else None


# ------------------------------------------------------------ NCCL flight recorder


class _PlainData(pickle.Unpickler):
    """Unpickles plain data only (dict, list, tuple, str, numbers, bool, None): any class or callable is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused: {module}.{name} (only plain data is read)")


def read_flight_record(data: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """(record, None) for a flight-recorder dump made of plain data; (None, reason) for anything else."""
    try:
        value = _PlainData(io.BytesIO(data)).load()
    except Exception as exc:  # noqa: BLE001 - the bytes come from the job's node: any failure is a reason
        return None, f"not read: {type(exc).__name__}: {str(exc)[:200]}"
    if not isinstance(value, dict):
        return None, f"not read: a {type(value).__name__}, not a dict"
    return value, None


def flight_position(record: dict[str, Any]) -> tuple[int | None, str | None]:
    """(the highest collective sequence number started or completed, that op's name) from a dump's entries."""
    best: tuple[int, str] | None = None
    entries = record.get("entries")
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        seq, state = entry.get("collective_seq_id"), entry.get("state")
        if isinstance(seq, int) and state in {"started", "completed"} and (best is None or seq > best[0]):
            best = (seq, str(entry.get("profiling_name") or ""))
    return best if best is not None else (None, None)
