"""Structural rules for a node that went away or cannot serve the job, whatever printed it.

A subject that is a machine (node, host, instance, raylet) with a predicate that says it is gone
(marked dead, missed heartbeats, not responding, unreachable, died, lost), a scheduler's prolog/epilog
failing on a node, a cloud's termination notice, and a GPU the node reports busy or unavailable. The
node is the line's own `node` group when it names one; otherwise app/domain/detection/line_nodes.py finds it with
the attempt's allocation.
"""

from __future__ import annotations

from app.domain.detection.signatures import NODE_FAIL, XID, Rule

# A machine, never a process: Ray's "The worker died unexpectedly" is one program's process, not a node.
_SUBJECT = r"(?i:\b(?:node|host|machine|instance|raylet|vm)s?\b)"
_GONE = (
    r"(?i:\bmarked (?:as )?dead\b|\bmissed too many heartbeats\b|\b(?:lost|no) heartbeats?\b"
    r"|\bis not responding\b|\bnot responding\b|\bunreachable\b|\bhas died\b|\bdied unexpectedly\b"
    r"|\bis dead\b|\bwas lost\b|\bhas been lost\b|\bwent away\b|\bhas crashed\b)"
)
# A line that only reports a retry or a recovery, or a setting, is not a loss.
# A socket's "Network is unreachable" (pip, a download) is about a route, not a node of the job.
_NOT_LOST = (
    r"(?i:\b(?:timeout|interval|threshold)\s*[:=]|\breconnect(?:ed|ing)\b|\brejoin(?:ed)?\b|\bhealthy\b"
    r"|\bnetwork is unreachable\b|\[Errno \d+\]|https?://)"
)


def _crash(name: str, category: str, anchors: tuple[str, ...], pattern: str, example: str, exclude: str = "") -> Rule:
    return Rule(
        name=name, kind="crash", anchors=anchors, pattern=pattern, label=category, exclude=exclude, example=example
    )


NODE_RULES: tuple[Rule, ...] = (
    _crash(
        "scheduler_prolog_failure",
        NODE_FAIL,
        ("Prolog failure", "prolog failure", "Epilog failure", "epilog failure", "PROLOG ERROR", "prolog error"),
        r"(?i:\b(?:prolog|epilog) (?:failure|error|failed)\b)[^\n]{0,40}?\bon (?:node )?(?P<node>[A-Za-z][\w.\-]*)"
        r"|(?i:\b(?:prolog|epilog) (?:failure|error|failed)\b)",
        "salloc: Prolog failure on node k003-006",
    ),
    _crash(
        "lame_workers",
        NODE_FAIL,
        ("lame workers found", "lame worker"),
        r"\blame workers? found\b",
        "INFO:tensorflow:ShutdownHook: lame workers found: HeartbeatManager(/job:worker/replica:0/task:0/device:CPU:0)",
    ),
    _crash(
        "node_lost",
        NODE_FAIL,
        (
            "marked dead",
            "marked as dead",
            "too many heartbeats",
            "heartbeat",
            "Heartbeat",
            "not responding",
            "unreachable",
            "Unreachable",
            "has died",
            "died unexpectedly",
            "is dead",
            "was lost",
            "has been lost",
            "went away",
            "has crashed",
        ),
        _SUBJECT + r"[^\n]{0,120}?" + _GONE,
        "The node with client ID 581656f84659be9bba58da993729644cfb554836 has been marked dead because the monitor "
        "has missed too many heartbeats from it.",
        exclude=_NOT_LOST,
    ),
    # The driver cannot bring a GPU up again (after it fell off the bus): the kernel's host field names the node.
    _crash(
        "gpu_init_failed",
        XID,
        ("RmInitAdapter failed", "rm_init_adapter failed"),
        r"NVRM: [^\n]{0,60}?(?:RmInitAdapter failed|rm_init_adapter failed)",
        "May 27 16:50:10 fedora kernel: NVRM: GPU 0000:09:00.0: RmInitAdapter failed! (0x22:0x56:894)",
    ),
    # slurmstepd could not end the step's processes: Slurm drains the node ("Kill task failed").
    _crash(
        "stepd_terminated_unkillable",
        NODE_FAIL,
        ("JOB NOT ENDING WITH SIGNALS",),
        r"\*\*\* (?:JOB|STEP) [\w.+]+ STEPD TERMINATED ON (?P<node>[\w.-]+) AT \S+ DUE TO JOB NOT ENDING WITH SIGNALS",
        "[2020-12-14T09:44:56.002] [63532.0] error: *** STEP 63532.0 STEPD TERMINATED ON cn106 AT 2020-12-14T09:44:56 "
        "DUE TO JOB NOT ENDING WITH SIGNALS ***",
    ),
    # Ray's driver: the raylet (the node's daemon) went away unexpectedly; `ip=` names the node.
    _crash(
        "raylet_terminated",
        NODE_FAIL,
        ("Raylet is terminated",),
        r"Raylet is terminated: ip=[\w.:-]+[^\n]*(?i:unexpected)",
        "2023-04-12 10:20:10,996 WARNING worker.py:1986 -- Raylet is terminated: ip=10.0.35.88, "
        "id=976bc7dded84cf30ed35b8051b9d9e6df0df4eceea1f84d81caae551. Termination is unexpected. "
        "Possible reasons include: (1) SIGKILL by the user or system OOM killer, (2) Invalid memory access from "
        "Raylet causing SIGSEGV or SIGBUS, (3) Other termination signals. Last 20 lines of the Raylet logs:",
    ),
    _crash(
        "instance_termination_notice",
        NODE_FAIL,
        ("termination is imminent", "preempted", "Preempted", "PREEMPTED", "interruption notice", "being reclaimed"),
        r"(?i:\btermination is imminent\b|\b(?:instance|vm|node|machine|host|spot|tpu)s?\b[^\n]{0,60}?"
        r"\b(?:(?:was|has been|is being|got) preempted|preempted\b)|\binterruption notice\b|\bbeing reclaimed\b)",
        "Dec 17 16:03:58Z translations-1-b-linux-v100-gpu-4-1tb-vvppjagzspgzcf58mfvmzw-1 start-worker 2024/12/17 "
        "16:03:58 GCP Metadata Service says termination is imminent",
        # a setting ("preemptible: true", "--requeue-on-preempt") names no preemption, unless the line says one happened
        exclude=r"(?i:^(?![^\n]*\b(?:was|has been|is being|got) preempted\b)[^\n]*?"
        r"(?:\bpreempt\w*\s*[:=]|--\w*preempt|\bif preempted\b|\bpreemptible\s*[:=]))",
    ),
    _crash(
        "gpu_devices_unavailable",
        XID,
        ("cudaErrorDevicesUnavailable", "busy or unavailable", "CUDA_ERROR_DEVICE_UNAVAILABLE"),
        r"cudaErrorDevicesUnavailable|CUDA_ERROR_DEVICE_UNAVAILABLE|device\(s\) is/are busy or unavailable",
        "2047: cudaSetDevice(cuda_device_id) error( cudaErrorDevicesUnavailable): CUDA-capable device(s) is/are busy "
        "or unavailable",
    ),
)
