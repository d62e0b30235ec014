"""Which nodes a crash line names: host fields (torchrun's `host :`, slurmstepd's `ON node`, NCCL's
`host:pid:tid`, `ip:`), and with the attempt's allocation any token equal to an allocated node (short or
fully qualified, any case), or a line naming the failed process's PID or rank together with one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from app.domain.decision.rootcause import Finding

_PID = re.compile(r"\b(?:pid|PID)\b:?\s*(\d+)")


# Ray/vLLM "(pid=1, ip=...)", "ip: ...", Ray's JSON events '"ip":"156.176.0.154"'; Ray's other ways of naming a node
# by its address ("and address: 10.0.0.5 and node name: ...", "Node IP: 10.0.0.5", "Owner Ip address: 10.0.0.5"):
# those fields name a node only when their value is an IPv4 address ("address: 0x7f..", "address already in use").
_IP_FIELD = re.compile(
    r"\bip['\"]?[:=]\s*['\"]?(?P<node>[\w.\-]+)"
    r"|(?i:\b(?:node ip|ip address|address|node name))\s*[:=]\s*(?P<node2>\d{1,3}(?:\.\d{1,3}){3})(?![\d.])"
)
_HOST_FIELDS = (
    re.compile(r"^\s*(?:\[\d+\]:\s*)?host\s*:\s*(?P<node>[\w.\-]+)\s*$"),  # torchrun's failure block
    re.compile(r"\*\*\* (?:JOB|STEP) [\w.+]+ ON (?P<node>[\w.\-]+) CANCELLED"),  # slurmstepd
    # NCCL's `host:pid:tid [dev]` prefix, also inside a quoted ("> ") line as posted to a forum or an issue, and
    # behind a bracketed timestamp a log collector put in front ("[2026-01-04 21:33:04] host:617:2799 [3]")
    re.compile(
        r"^\s*(?:>\s*)?(?:\[[^\]]*\d\d:\d\d:\d\d[^\]]*\]\s*)?(?:\[?[Rr]ank\s?\d+\]?:\s*|\d+:\s)?(?P<node>[A-Za-z][\w.\-]*|\d[\w.\-]*?[A-Za-z][\w.\-]*)"
        r":\d+:\d+ \[\d+\]"
    ),
    _IP_FIELD,
    re.compile(r"srun: error: (?P<node>[\w.\-]+): tasks? \d"),
    # Prose and key=value host fields ("failed on node cn131", "node=gpu-12", "hostname: a100-3"): a host name
    # there has a digit, so "on node failure" or "host: the server" names nothing.
    re.compile(
        r"(?i:\b(?:on|at|from) (?:node|host)\s+|\b(?:node|host|hostname|nodename|node_name|node name)\s*[=:]\s*)"
        r"(?P<node>[A-Za-z][\w.\-]*\d[\w.\-]*)"
    ),
)
_ADDRESS = re.compile(r"[\d.]+")
_TOKEN = re.compile(r"[A-Za-z0-9][\w\-]*(?:\.[\w\-]+)*")


# A node's fabric interface names ("qgpu2018-ib0", "nid001-hsn0"): the same machine as the node.
_INTERFACE = re.compile(r"-(?:ib|hsn|eth|opa|ipoib|roce)\d*$")


def _short(name: str) -> str:
    return _INTERFACE.sub("", name.split(".", 1)[0].lower())


_IPV4 = re.compile(r"(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})")


def match_allocation(name: str, allocation: Sequence[str]) -> str | None:
    """The allocated node `name` denotes (same name, or same short name; case-insensitive), as allocated; an IPv4
    address denotes a node whose name spells it with dashes (EC2/GKE style "ip-10-1-73-87")."""
    lowered, short = name.lower(), _short(name)
    address = _IPV4.fullmatch(name)
    dashed = "-".join(address.groups()) if address else None
    for node in allocation:
        if node.lower() == lowered or _short(node) == short and not short.isdigit():
            return node
        if dashed is not None and re.search(rf"(?<!\d){dashed}$", _short(node)):
            return node
    return None


# NCCL's "Connect to PEER<port> failed": the peer did not answer; the reporting host (the line's prefix) is fine.
_FAILED_PEER = re.compile(r"\bConnect to (?P<node>[\w.\-]+)<\d+> failed\b")


def nodes_in_line(line: str, allocation: Sequence[str] = ()) -> tuple[str, ...]:
    """Nodes a line names: launcher/Slurm/NCCL host fields, and any token equal to an allocated node; a line
    reporting a failed connection to a peer names the peer alone."""
    peer = _FAILED_PEER.search(line)
    if peer is not None:
        name = peer.group("node")
        allocated = match_allocation(name, allocation) if allocation else name
        return (allocated,) if allocated is not None else ()
    found: dict[str, None] = {}
    for pattern in _HOST_FIELDS:
        for match in pattern.finditer(line):
            name = (match.group("node") or match.groupdict().get("node2") or "").rstrip(".")
            if not name:
                continue
            if allocation:
                allocated = match_allocation(name, allocation)
                if allocated is not None:
                    found.setdefault(allocated, None)
            elif not _ADDRESS.fullmatch(name) or pattern is _IP_FIELD:
                found.setdefault(name, None)  # Ray names a node by its address: with no node list it is the name
    if allocation:
        for match in _TOKEN.finditer(line):
            allocated = match_allocation(match.group(0), allocation)
            if allocated is not None:
                found.setdefault(allocated, None)
    return tuple(found)


_LOOPBACK = frozenset({"localhost", "localhost.localdomain", "127.0.0.1", "::1"})
LAUNCHER_BLOCK_FIELD = re.compile(r"^\s*(?:\[\d+\]:\s*)?(?:exitcode|traceback)\s*:")
_BLOCK_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
_BLOCK_HOST = re.compile(r"^\s*host\s*:\s*(\S+)")


def launcher_block_facts(lines_before: Sequence[str]) -> tuple[int | None, str | None]:
    """(rank, host) of torchrun's failure block, from the lines just above its `exitcode :` / `traceback :` line."""
    rank: int | None = None
    host: str | None = None
    for text in reversed(lines_before[-6:]):
        if text.lstrip().startswith(("Root Cause", "=", "-", "Failures:")):
            break  # the block's head: what is above belongs to another block
        found = _BLOCK_RANK.match(text)
        if found and rank is None:
            rank = int(found.group(1))
        named = _BLOCK_HOST.match(text)
        if named and host is None:
            host = named.group(1)
    return rank, host


# Ray's "actor died" block: one field a line ("\tclass_name: ...", "\tip: 10.72.56.3"), optionally behind the
# driver's "(Actor pid=1, ip=...)" prefix, just above "The actor is dead because its node has died."
_ACTOR_BLOCK_FIELD = re.compile(
    r"^\s*(?:\([^)]*\)\s*)?(?P<key>class_name|actor_id|pid|namespace|name|ip|node_id|job_id)\s*:\s*(?P<value>\S*)"
)


def actor_block_node(lines_before: Sequence[str]) -> str | None:
    """The `ip:` of Ray's actor block directly above a line (the lines just before it, oldest first): the node the
    dead actor ran on, which the block's closing line ("its node has died") does not repeat."""
    for text in reversed(lines_before[-8:]):
        field = _ACTOR_BLOCK_FIELD.match(text)
        if field is None:
            return None  # the block ended: what is above belongs to something else
        value = field.group("value").strip("'\"")
        if field.group("key") == "ip" and value and value.lower() not in _LOOPBACK:
            return value
    return None


_ROOT_CAUSE_HEAD = "Root Cause (first observed failure)"
_BLOCK_ENTRY = re.compile(r"\[\d+\]:")


def under_root_cause_head(lines_before: Sequence[str]) -> bool:
    """True when a torchrun failure-block line (`exitcode :`, `traceback :`) belongs to the entry under
    "Root Cause (first observed failure):", the launcher's own word on which process failed first (the
    "Failures:" entries printed above it are the others)."""
    entry_seen = False
    for text in reversed(lines_before[-9:]):
        stripped = _LABEL.sub("", text, count=1).strip()
        if entry_seen:
            return stripped.startswith(_ROOT_CAUSE_HEAD)
        if _BLOCK_ENTRY.fullmatch(stripped):
            entry_seen = True  # the entry's "[0]:" line: the head, if any, is just above it
        elif stripped.startswith((_ROOT_CAUSE_HEAD, "=", "-", "Failures:")):
            return stripped.startswith(_ROOT_CAUSE_HEAD)
    return False


def process_id(line: str) -> str | None:
    """The PID a launcher line names ("exitcode : -9 (pid: 3832)", "Signal 9 (SIGKILL) received by PID 3832")."""
    found = _PID.search(line)
    return found.group(1) if found else None


def lines_naming_pid(lines: Sequence[str], pid: str, *, limit: int = 5) -> list[str]:
    """Other lines (before the crash line) that name this PID as a whole token (NCCL's `host:pid:tid` prefix, a
    program's start-up line), nearest first: with the allocation they say which node the process ran on."""
    token = re.compile(rf"(?<![\w.]){re.escape(pid)}(?![\w.])")
    found: list[str] = []
    for line in reversed(lines):
        if token.search(line) and not LAUNCHER_BLOCK_FIELD.match(line) and "failed (exitcode" not in line:
            found.append(line)
            if len(found) >= limit:
                break
    return found


def lines_naming_rank(lines: Sequence[str], rank: int, *, limit: int = 20) -> list[str]:
    """Lines that name this global rank in their text, not just as a `[rankN]:` label (NCCL's init line
    `host:pid:tid [0] NCCL INFO comm 0x.. rank 1 nRanks 2`, a start-up line): with the allocation they say
    which node the rank ran on (torchrun gives ranks in rendezvous order, so the task layout cannot). Lines before
    the crash line, nearest first (a rerun in the same file gives the rank anew)."""
    token = re.compile(rf"\b[Rr]ank\s*[:=#]?\s*{rank}(?![\d.])")
    found: list[str] = []
    for line in reversed(lines):
        _, body = _split_label(line)
        if token.search(body):
            found.append(line)
            if len(found) >= limit:
                break
    return found


_LABEL = re.compile(r"^\s*(?:\[?[Rr]ank\s?\d+\]?:\s?|\d+:\s)")


def _split_label(line: str) -> tuple[str, str]:
    match = _LABEL.match(line)
    return (match.group(0), line[match.end() :]) if match else ("", line)


CONTEXT_SOURCE = "a line naming the failed process's rank or PID"
BLOCK_SOURCE = "the host line of the launcher's failure block"


def context_line(node: str, context: Sequence[str], allocation: Sequence[str]) -> str | None:
    """The context line (naming the failed process's PID or rank) that gave `node`, if one did."""
    for line in context:
        named = nodes_in_line(line, allocation)
        if named and named[0] == node:
            return " ".join(line.split())[:300]
    return None


def with_line_nodes(
    finding: Finding,
    allocation: Sequence[str] = (),
    tasks_per_node: str | None = None,
    context: Sequence[str] = (),
) -> Finding:
    """The finding with the nodes its line names added (the signature's own first, mapped onto the allocation),
    else the allocated nodes that `context` (other lines naming the failed PID) names.

    Loopback names are never a node. Ranks are not mapped here: torchrun's ranks follow rendezvous order, not
    the Slurm task layout (`attribute` maps an infrastructure finding's rank, as before)."""
    nodes: dict[str, None] = {}
    for name in finding.nodes:
        if name.lower() not in _LOOPBACK:
            nodes.setdefault((match_allocation(name, allocation) if allocation else None) or name, None)
    for name in nodes_in_line(finding.line, allocation):
        if name.lower() not in _LOOPBACK:
            nodes.setdefault(name, None)
    if allocation and not any(n in allocation for n in nodes):
        for line in context:  # lines naming the failed process's PID or rank, nearest first: allocated nodes only
            named = nodes_in_line(line, allocation)
            if named:
                nodes.setdefault(named[0], None)
                break
    merged = tuple(nodes)
    if merged == finding.nodes:
        return finding
    return replace(finding, nodes=merged)
