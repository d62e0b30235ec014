"""Root cause of a failed attempt: retry outlook per category, the nodes to blame (with provenance), the primary cause.

A failure is a cascade: a CUDA error on one rank, NCCL errors and tracebacks on the others, the
launcher's summary, srun's kill lines. `primary` picks the earliest *specific* cause (in source time
when both lines carry one, else in reading order); the rest are consequences. Known consequences
(a peer that went away, the launcher's SIGTERM to the survivors, srun's `Terminated`) never win over
anything else, so a SIGKILLed rank is named by the launcher's summary, not by a survivor's
`Connection reset by peer`. Only an `infrastructure` outlook implicates a node: a Python ValueError
on node7 does not make node7 suspect.

The nodes a line names (with the attempt's allocation) are app/domain/detection/line_nodes.py's. `fingerprint`
is "the same failure": the category and the origin line with the parts that change from run to run
normalised away.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from app.domain.detection.signatures import (
    CHECKPOINT_WRITE_FAILURE,
    CUDA_ERROR,
    CUDA_OOM,
    FILESYSTEM,
    HOST_OOM,
    NAN_LOSS,
    NCCL_ERROR,
    NCCL_TIMEOUT,
    NODE_FAIL,
    PYTHON_TRACEBACK,
    SEGFAULT,
    TIME_LIMIT,
    TRACEBACK_START,
    XID,
)

INFRASTRUCTURE = "infrastructure"  # retry, excluding the blamed nodes
TRANSIENT = "transient"  # retry without exclusion
APPLICATION = "application"  # a deterministic error in the user's program
OUTLOOKS: tuple[str, ...] = (INFRASTRUCTURE, TRANSIENT, APPLICATION)

# Provenance of a blamed node.
FROM_LINE = "line"  # the line names the host (NCCL [host:pid], srun: error: node:, syslog host, Slurm step line)
FROM_RANK = "rank"  # a rank mapped to a node through the attempt's node list and task layout
FROM_ALLOCATION = "allocation"  # the attempt ran on exactly one node

CATEGORY_OUTLOOK: dict[str, str] = {
    XID: INFRASTRUCTURE,
    NODE_FAIL: INFRASTRUCTURE,
    NCCL_ERROR: TRANSIENT,
    NCCL_TIMEOUT: TRANSIENT,
    TIME_LIMIT: TRANSIENT,
    CHECKPOINT_WRITE_FAILURE: APPLICATION,
    FILESYSTEM: APPLICATION,
    CUDA_OOM: APPLICATION,
    HOST_OOM: APPLICATION,
    NAN_LOSS: APPLICATION,
    PYTHON_TRACEBACK: APPLICATION,
    SEGFAULT: APPLICATION,
    CUDA_ERROR: APPLICATION,
}
# Rules whose outlook differs from their category's.
RULE_OUTLOOK: dict[str, str] = {
    "slurm_preempted": TRANSIENT,
    "instance_termination_notice": TRANSIENT,  # the cloud takes the machine back; the next one is fine
    "filesystem_stale_handle": TRANSIENT,
    "filesystem_io_error": TRANSIENT,
    "nccl_duplicate_gpu": APPLICATION,
}
# Notices that a node is being taken back (Slurm preemption, a cloud's termination notice, Ray's "node was
# preempted"): a node loss reported with one of them is the preemption, transient, and blames no node.
PREEMPTION_RULES = frozenset({"slurm_preempted", "instance_termination_notice"})
# Xids NVIDIA attributes to the program (graphics engine exception, MMU fault, GPU stopped processing).
APPLICATION_XIDS = frozenset({13, 31, 43})
# NCCL lines that are about the fabric (an IB/RoCE/NVLink link) rather than a collective: infrastructure whether or
# not the line names its host. A failed verbs call (`Call to ibv_create_cq failed`) is not: real threads trace those
# to the node's RDMA configuration or resource limits, which a retry elsewhere does not fix either.
_NCCL_HARDWARE = re.compile(
    r"NET/IB|net_ib|IBV_WC_\w+|mlx5|RoCE|NVLink|Got completion from peer|transport retry counter|link (?:down|flap)",
)
_NCCL_VERBS_CALL = re.compile(r"\bCall to ibv_\w+ failed\b")

# NCCL refusing the program's request: the same call fails the same way on any node.
_NCCL_USAGE = re.compile(
    r"invalid argument|[Ii]nvalid usage|ncclInvalid(?:Usage|Argument)|no algorithm/protocol available"
)

# How specific a line is (lower wins): causes, then likely consequences, then launcher/Slurm summaries.
TIER_CAUSE = 0
TIER_CHECKPOINT = 1  # "checkpoint write failed" loses to the errno that says why
TIER_CONSEQUENCE = 2  # NCCL errors/timeouts, plain tracebacks, the scheduler ending the job
TIER_SUMMARY = 3  # a launcher or srun line that names a signal (-9, -11, Killed, Bus error)
TIER_GENERIC_SUMMARY = 4  # "exitcode: 1", "Exited with exit code 1", DUE TO TASK FAILURE, ChildFailedError
TIER_KNOWN_CONSEQUENCE = 5  # a peer went away, SIGTERM to survivors, srun's Terminated: never the cause
SUMMARY_RULES = frozenset(
    {
        "torch_elastic_failed_signal",
        "torch_elastic_failed_sigkill",
        "torch_elastic_exitcode_signal",
        "torch_elastic_sigkill",
        "srun_task_out_of_memory",
        "srun_task_killed",
        "srun_task_signal",
        "fatal_abort",  # abort() after an exception: the exception says why
        "shell_killed",
        "shell_core_dumped",
    }
)
GENERIC_SUMMARY_RULES = frozenset(
    {"torch_elastic_failed", "torch_elastic_exitcode", "srun_task_exited", "slurm_step_task_failure"}
)
CONSEQUENCE_CATEGORIES = frozenset({NCCL_ERROR, NCCL_TIMEOUT, PYTHON_TRACEBACK, TIME_LIMIT})
_LAUNCHER_BLOCK = re.compile(r"^\s*(?:\[\d+\]:\s*)?(?:exitcode|traceback)\s*:")
_LAUNCHER_EXCEPTION = re.compile(r"ChildFailedError|CalledProcessError|ProcessRaisedException|ProcessExitedException")
# PyTorch re-raising an exception of another thread or process (its ExceptionWrapper): the message says where it
# was caught, and the "Original Traceback" printed after it, with the real exception line, is the more specific.
_RERAISED = re.compile(r"\bCaught [A-Z]\w* in (?:DataLoader worker process|replica|pin memory thread)\b")

# What a rank prints when another process died first: its peer's socket closed under it.
_PEER_LOST = re.compile(
    r"(?:Connection|connection) (?:reset|closed) by (?:remote )?peer|[Rr]emote process exited"
    r"|caused by a remote worker|ConnectionResetError|[Bb]roken pipe|peer (?:closed|reset) (?:the )?connection"
    r"|Connection was likely closed|connection to the C10d store has failed|failed to shutdown the rendezvous"
)
# The launcher, or srun, ending the survivors (or itself) after the first failure, or Slurm cancelling the step.
_SHUTDOWN = re.compile(
    r"SignalException: Process \d+ got signal: 15\b|got signal: 15\b|Received 15 death signal"
    r"|closing signal SIGTERM|srun: error: \S+: tasks? [\d,\-]+: (?:Terminated\b|Exited with exit code)"
    r"|srun: forcing job termination"
    r"|\*\*\* (?:JOB|STEP) [\w.+]+ ON \S+ CANCELLED AT \S+ \*\*\*"
)
_SHUTDOWN_RULES = frozenset({"srun_task_exited"})

ITERATION_TOLERANCE = 5  # "the same place": the same iteration, give or take this many


@dataclass(frozen=True)
class Finding:
    """One crash line of an attempt (from the reader, or an anomaly row), as root-cause analysis sees it."""

    category: str
    rule: str
    line: str = ""
    detail: str = ""
    nodes: tuple[str, ...] = ()
    rank: int | None = None
    xid: int | None = None
    source_time: dt.datetime | None = None
    order: int = 0  # reading order (line number, or anomaly id)
    first_observed: bool = False  # in torchrun's "Root Cause (first observed failure)" entry


@dataclass(frozen=True)
class BlamedNode:
    """A node the evidence implicates, and how that was derived (line, rank or allocation)."""

    node: str
    provenance: str
    detail: str = ""

    def to_json(self) -> dict[str, str]:
        data = {"node": self.node, "provenance": self.provenance}
        if self.detail:
            data["detail"] = self.detail
        return data


@dataclass(frozen=True)
class Attribution:
    """The nodes one finding blames, with a note when a rank could not be mapped."""

    blamed: tuple[BlamedNode, ...] = ()
    note: str | None = None


@dataclass(frozen=True)
class RootCause:
    """An attempt's failure: the primary finding, its outlook, the nodes to blame, the consequences."""

    primary: Finding | None
    outlook: str | None
    blamed: tuple[BlamedNode, ...] = ()
    consequences: tuple[Finding, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
    node: str | None = None  # where the failed process ran, when the evidence says (see failed_node)
    node_from: str | None = None  # how `node` was found when the root cause's own line does not name it

    @property
    def category(self) -> str | None:
        return self.primary.category if self.primary else None


def base_rule(rule: str) -> str:
    """The rule that decided a traceback's category ("python_traceback:cuda_oom" -> "cuda_oom")."""
    return rule.split(":", 1)[1] if rule.startswith("python_traceback:") else rule


def outlook_of(
    *, category: str, rule: str = "", line: str = "", nodes: Sequence[str] = (), xid: int | None = None
) -> str:
    """Retry outlook of one finding: infrastructure, transient or application."""
    name = base_rule(rule)
    if name in RULE_OUTLOOK:
        return RULE_OUTLOOK[name]
    if category == XID and xid in APPLICATION_XIDS:
        return APPLICATION
    if category == NCCL_ERROR and _NCCL_USAGE.search(line):
        return APPLICATION
    if category == NCCL_ERROR and fabric_line(line):
        return INFRASTRUCTURE
    return CATEGORY_OUTLOOK.get(category, TRANSIENT)


def fabric_line(line: str) -> bool:
    """An NCCL line about the fabric (IB completion or async error, a failed verbs call, a link down): the node
    whose prefix it carries is blamed whatever else the attempt shows (NCCL's usage errors excepted)."""
    return bool(_NCCL_HARDWARE.search(line)) and not _NCCL_VERBS_CALL.search(line) and not _NCCL_USAGE.search(line)


def outlook_of_finding(finding: Finding) -> str:
    """outlook_of for a Finding."""
    return outlook_of(
        category=finding.category, rule=finding.rule, line=finding.line, nodes=finding.nodes, xid=finding.xid
    )


def known_consequence(finding: Finding) -> bool:
    """A line that only reports the failure of another process (a lost peer, a SIGTERM, srun's Terminated)."""
    texts = (finding.line, finding.detail)
    if base_rule(finding.rule) in _SHUTDOWN_RULES:
        return True
    return any(_PEER_LOST.search(t) or _SHUTDOWN.search(t) for t in texts if t)


def reraised(finding: Finding) -> bool:
    """PyTorch re-raising another process's or thread's exception: that one's original traceback follows."""
    return finding.category == PYTHON_TRACEBACK and reraise_text(finding.detail or finding.line)


def reraise_text(text: str) -> bool:
    """The exception line of a PyTorch re-raise ("Caught ValueError in DataLoader worker process 0.")."""
    return bool(_RERAISED.search(text))


def tier_of(finding: Finding) -> int:
    """How specific a finding is as a root cause (lower is more specific)."""
    name = base_rule(finding.rule)
    text = finding.detail or finding.line
    if known_consequence(finding):
        return TIER_KNOWN_CONSEQUENCE
    launcher = finding.category == PYTHON_TRACEBACK and _LAUNCHER_EXCEPTION.search(text)
    if name in GENERIC_SUMMARY_RULES or launcher:
        return TIER_GENERIC_SUMMARY
    if finding.rule == "python_traceback" and text.strip().endswith(TRACEBACK_START):
        return TIER_GENERIC_SUMMARY  # cut off before its exception line: says only that something raised
    if name in SUMMARY_RULES or _LAUNCHER_BLOCK.match(finding.line) or _LAUNCHER_EXCEPTION.search(text):
        return TIER_SUMMARY
    if reraised(finding):
        return TIER_SUMMARY
    if finding.category == CHECKPOINT_WRITE_FAILURE:
        return TIER_CHECKPOINT
    if fabric_fault(finding):
        return TIER_CAUSE
    if finding.category in CONSEQUENCE_CATEGORIES or name == "slurm_preempted":
        return TIER_CONSEQUENCE
    return TIER_CAUSE


def fabric_fault(finding: Finding) -> bool:
    """An NCCL error about the fabric of a named host (an IB completion error, a link down): a cause in its own
    right, where other NCCL errors are what a rank prints after something else failed."""
    return finding.category == NCCL_ERROR and outlook_of_finding(finding) == INFRASTRUCTURE


def _earlier(a: Finding, b: Finding) -> bool:
    """True when a was written before b: source time when both have one, else reading order."""
    if a.source_time is not None and b.source_time is not None and a.source_time != b.source_time:
        return a.source_time < b.source_time
    return a.order < b.order


_PID = re.compile(r"\b(?:pid|PID)\b:?\s*(\d+)")


def _pid(finding: Finding) -> str | None:
    found = _PID.search(finding.line) or _PID.search(finding.detail)
    return found.group(1) if found else None


def primary(findings: Iterable[Finding]) -> Finding | None:
    """The earliest finding of the most specific tier; of the lines about the same process (same PID, same
    tier) the one that names its node or rank (torchrun's block says what its `failed (exitcode: -9)` does not)."""
    candidates = list(findings)
    best: Finding | None = None
    for finding in candidates:
        if best is None:
            best = finding
            continue
        tier, best_tier = tier_of(finding), tier_of(best)
        if tier < best_tier or (tier == best_tier and _earlier(finding, best)):
            best = finding
    best = _launcher_first_observed(best, candidates)
    if best is not None and (not best.nodes or best.rank is None) and _pid(best) is not None:
        same = [
            f
            for f in candidates
            if f is not best
            and tier_of(f) == tier_of(best)
            and _pid(f) == _pid(best)
            and (f.nodes or f.rank is not None)
        ]
        if same:
            return min(same, key=lambda f: f.order)
    return best


def _launcher_first_observed(best: Finding | None, candidates: Sequence[Finding]) -> Finding | None:
    """torchrun lists the other failures before its "Root Cause (first observed failure)" entry: when the best
    finding is a launcher summary, the entry the launcher itself calls first wins among summaries of that tier."""
    if best is None or best.first_observed or tier_of(best) < TIER_SUMMARY:
        return best
    named = [f for f in candidates if f.first_observed and tier_of(f) == tier_of(best)]
    return min(named, key=lambda f: f.order) if named else best


def parse_tasks_per_node(value: str | None) -> tuple[int, ...] | None:
    """Slurm's SLURM_TASKS_PER_NODE ("4(x2),3") as one count per node; None when absent or malformed."""
    if not value or not value.strip():
        return None
    counts: list[int] = []
    for part in value.strip().split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not match:
            return None
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return tuple(counts)


def node_of_rank(rank: int, nodes: Sequence[str], tasks_per_node: str | None) -> str | None:
    """The node a global rank ran on under block distribution (ranks fill node 0 first), or None."""
    counts = parse_tasks_per_node(tasks_per_node)
    if counts is None or len(counts) != len(nodes) or rank < 0:
        return None
    upper = 0
    for node, count in zip(nodes, counts, strict=True):
        upper += count
        if rank < upper:
            return node
    return None


def attribute(finding: Finding, *, attempt_nodes: Sequence[str] = (), tasks_per_node: str | None = None) -> Attribution:
    """The nodes one finding blames: named in the line, else its rank's node, else the attempt's only node."""
    fabric = finding.category == NCCL_ERROR and fabric_line(finding.line)
    if outlook_of_finding(finding) != INFRASTRUCTURE and not (fabric and finding.nodes):
        return Attribution()
    if finding.nodes:
        return Attribution(tuple(BlamedNode(node, FROM_LINE) for node in dict.fromkeys(finding.nodes)))
    if finding.rank is not None and len(attempt_nodes) > 1:
        node = node_of_rank(finding.rank, attempt_nodes, tasks_per_node)
        if node is not None:
            return Attribution((BlamedNode(node, FROM_RANK, f"rank {finding.rank}, tasks per node {tasks_per_node}"),))
        return Attribution(note=f"rank {finding.rank} could not be mapped to a node: task layout unknown")
    if len(attempt_nodes) == 1:
        return Attribution((BlamedNode(attempt_nodes[0], FROM_ALLOCATION, "the attempt ran on this node only"),))
    return Attribution()


def analyse(
    findings: Sequence[Finding],
    *,
    attempt_nodes: Sequence[str] = (),
    tasks_per_node: str | None = None,
    node_hints: Sequence[Finding] = (),
) -> RootCause:
    """Primary cause, its outlook and every node infrastructure evidence blames.

    `node_hints` are lines kept apart (printed after Recovery acted): never a cause, but the launcher's report of
    the failed rank among them still says where it ran (srun's exit lines there do not: Recovery ended the tasks)."""
    first = primary(findings)
    if first is None:
        return RootCause(primary=None, outlook=None)
    outlook = outlook_of_finding(first)
    preempted = first.category == NODE_FAIL and any(base_rule(f.rule) in PREEMPTION_RULES for f in findings)
    if preempted:
        outlook = TRANSIENT  # the node went away because it was taken back, not because it is faulty
    blamed: dict[str, BlamedNode] = {}
    notes: list[str] = []
    for finding in findings:
        if preempted and finding.category == NODE_FAIL:
            continue
        attribution = attribute(finding, attempt_nodes=attempt_nodes, tasks_per_node=tasks_per_node)
        for node in attribution.blamed:
            blamed.setdefault(node.node, node)
        if attribution.note and attribution.note not in notes:
            notes.append(attribution.note)
    failed, failed_from = failed_node(first, findings, node_hints)
    return RootCause(
        primary=first,
        outlook=outlook,
        blamed=tuple(blamed.values()),
        consequences=tuple(f for f in findings if f is not first),
        notes=tuple(notes),
        node=failed,
        node_from=failed_from,
    )


_SRUN_EXITED = re.compile(r"srun: error: (?P<node>[\w.\-]+): tasks? (?P<task>[\d,\-]+): Exited with exit code [1-9]")


_SRUN_TASK = re.compile(r"srun: error: [\w.\-]+: tasks? \d")  # its number is a Slurm task, not a process's rank


def srun_task_line(text: str) -> bool:
    """Whether this is srun's line about a task (`srun: error: node2: task 1: ...`): its number is no rank."""
    return bool(_SRUN_TASK.search(text))


def srun_failed_task(text: str) -> tuple[str, str] | None:
    """(node, task) of srun's `srun: error: <node>: task <n>: Exited with exit code N` line: Slurm's task layout
    says where that task ran, whatever the hosts are called inside the job (all `localhost` in the lab)."""
    found = _SRUN_EXITED.search(text)
    return (found.group("node"), found.group("task")) if found else None


def srun_provenance(task: str) -> str:
    """How a root cause's node was found from srun's exit line (shown with the node)."""
    return f"srun: task {task} was the first to exit with an error"


def failed_node(
    first: Finding, findings: Sequence[Finding], hints: Sequence[Finding] = ()
) -> tuple[str | None, str | None]:
    """(node, how it was found) of the failed process: the root cause's own node (its line named it), else the
    node another line gives the same rank (the launcher's failure report: torchrun's `rank :` with its `host :`),
    else the node of srun's first `Exited with exit code N` (the task whose launcher saw its process die; the
    others are `Terminated`). `hints` (printed after Recovery acted) count for the rank, not for srun's order."""
    if first.nodes:
        return first.nodes[0], None
    if first.rank is not None:
        same = [
            f
            for f in [*findings, *hints]
            if f is not first and f.rank == first.rank and f.nodes and not srun_task_line(f.line)
        ]
        if same:
            report = min(same, key=lambda f: f.order)
            return report.nodes[0], f"the launcher's report of rank {first.rank} names its host"
    exited = [f for f in findings if _SRUN_EXITED.search(f.line) or _SRUN_EXITED.search(f.detail)]
    if not exited:
        return None, None
    earliest = min(exited, key=lambda f: f.order)
    found = srun_failed_task(earliest.line) or srun_failed_task(earliest.detail)
    return (found[0], srun_provenance(found[1])) if found else (None, None)


# ---------------------------------------------------------------- fingerprints

# Log prefixes before the message: glog ("E1205 07:45:46.196000 18042 torch/x.py:869] "), rank labels
# ("[rank3]:", "Rank0:", "3: ", "[default0]:"), NCCL's "host:pid:tid [gpu]", bracketed timestamps.
_LOG_PREFIXES = (
    re.compile(r"^\s*[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+\s+\S+:\d+\]\s*"),
    re.compile(r"^\s*\[?(?:[Rr]ank|default)\s?\d+\]?:\s?"),
    re.compile(r"^\s*\d+:\s"),
    re.compile(r"^\s*[\w.\-]+:\d+:\d+ \[\d+\]\s*"),
    re.compile(r"^\s*\[[^\]]*\d\d:\d\d:\d\d[^\]]*\]\s*"),
)
_VOLATILE: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\d{4}-\d\d-\d\d[T _]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"), "<time>"),
    # Dates around a time: "2024/12/17", "Fri Aug 28 22:45:13 2026", syslog's "Dec  5"; epoch seconds.
    (re.compile(r"\b\d{4}[-/]\d\d[-/]\d\d\b"), "<date>"),
    (
        re.compile(
            r"\b(?:(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) )?(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?"
            r"|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?) +\d{1,2}\b"
        ),
        "<date>",
    ),
    (re.compile(r"\b1[5-9]\d{8}(?:\.\d+)?\b"), "<time>"),
    # Slurm job and step ids: a resubmission gets new ones.
    (re.compile(r"\b((?i:job(?:[ _]?id)?|stepid|step)[=: ]*)\d+(?:\.\d+|\.batch|\.extern)?\b"), r"\1<n>"),
    (re.compile(r"\b\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?(?!\d)"), "<time>"),
    (re.compile(r"(?<=<time>) \d{4}\b"), ""),  # ctime's year after the time
    (re.compile(r"\[?\b(?:\d{1,3}\.){3}\d{1,3}\b\]?(?::\d+)?"), "<ip>"),
    (re.compile(r"\[(?:[0-9a-fA-F]{0,4}:){2,7}[0-9a-fA-F]{0,4}\](?::\d+)?"), "<ip>"),
    (re.compile(r"0x[0-9a-fA-F]+"), "<hex>"),
    (re.compile(r"\b[0-9a-f]{12,}\b"), "<hex>"),
    (re.compile(r"\b(pid|PID|tid|TID|Process|process|port|Port)[=: ]+\d+"), r"\1 <n>"),
    (re.compile(r"\b([Rr]ank|local_rank|RANK|[Dd]evice|GPU|gpu|cuda:)([\s:=#]*)\d+"), r"\1\2<n>"),
    (re.compile(r"(\.(?:cc|cpp|c|h|hpp|cu|py)):\d+\b"), r"\1:<n>"),
    # What differs between two runs failing the same way: memory figures (free bytes, what PyTorch holds),
    # elapsed times ("ran for 600026 milliseconds"), collective sequence numbers (they restart on a resume).
    (re.compile(r"\b\d+(?:\.\d+)?\s?(?:bytes|[KMGTP]i?B)\b"), "<size>"),
    (re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|milliseconds?|seconds?|secs?|s|minutes?|min)\b"), "<duration>"),
    (re.compile(r"\b((?i:seq(?:uence)?(?:_?num(?:ber)?)?|opSeq))([=:# ]+)\d+"), r"\1\2<n>"),
    (re.compile(r":\d{2,5}\b"), ":<port>"),
)
# Peer-loss messages are one cause whatever the transport says (gloo alternates "Read error ... reset by
# peer" and "Connection closed by peer"): one origin text for all of them.
_BACKEND = re.compile(r"\b(gloo|nccl|NCCL|ucc|mpi|c10d)\b")


def normalise_origin(text: str, *, job_dirs: Sequence[str] = ()) -> str:
    """The origin line without what changes between runs: log prefixes, times, PIDs, ports, addresses, ranks, paths."""
    line = text.strip()
    for _ in range(3):  # prefixes nest: "[rank1]: E1205 07:45:46.196000 18042 x.py:1] ..."
        before = line
        for prefix in _LOG_PREFIXES:
            line = prefix.sub("", line, count=1)
        if line == before:
            break
    for root in sorted((d.rstrip("/") for d in job_dirs if d and d.strip("/")), key=len, reverse=True):
        line = line.replace(root, "<job>")
    if _PEER_LOST.search(line):
        backend = _BACKEND.search(line)
        return f"{backend.group(1).lower() + ': ' if backend else ''}connection to a peer lost"
    for pattern, replacement in _VOLATILE:
        line = pattern.sub(replacement, line)
    return " ".join(line.split())


def fingerprint(category: str, detail: str, *, job_dirs: Sequence[str] = ()) -> str:
    """What "the same failure" means across reruns: category plus the normalised origin line."""
    return f"{category}: {normalise_origin(detail, job_dirs=job_dirs)}"[:500]


def fingerprint_id(text: str | None) -> str | None:
    """A short stable id of a fingerprint, for tables and reasons ("fp-3f2a9c0b1d4e")."""
    if not text:
        return None
    return "fp-" + hashlib.sha256(text.encode()).hexdigest()[:12]


def failure_signature(category: str, detail: str) -> str:
    """The fingerprint (kept under its former name for callers that compare signatures)."""
    return fingerprint(category, detail)


def same_place(
    signature: str | None,
    iteration: int | None,
    earlier_signature: str | None,
    earlier_iteration: int | None,
    *,
    tolerance: int = ITERATION_TOLERANCE,
) -> bool:
    """The same failure: equal fingerprints (the failure's identity) and, when both attempts' iterations are
    known, the same iteration give or take `tolerance`. An unknown iteration (no step counter read in that attempt,
    e.g. a resumed attempt that failed one step after its checkpoint) is no evidence of another place."""
    if not signature or signature != earlier_signature:
        return False
    if iteration is None or earlier_iteration is None:
        return True
    return abs(iteration - earlier_iteration) <= tolerance


def decided_anomaly(refs: Sequence[str]) -> int | None:
    """The anomaly an Advice's evidence refs say it rests on: the crash's root cause, else the signal's anomaly;
    the newest of each (an Advice's refs accumulate as later lines move the root cause)."""
    for prefix in ("root_cause:anomaly:", "anomaly:"):
        for ref in reversed(refs):
            if ref.startswith(prefix) and ref[len(prefix) :].isdigit():
                return int(ref[len(prefix) :])
    return None
