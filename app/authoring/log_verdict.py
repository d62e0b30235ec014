"""check-log's verdict on a log: root cause, retry outlook, blamed nodes, and what the advisor would do."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any, TextIO

from app.domain.decision import rootcause
from app.domain.decision.advice import Failure, JobPolicy, Operation, SitePolicy, decide
from app.domain.decision.retry import FailureKind
from app.domain.detection import line_nodes
from app.infra.config import Settings

_OUTLOOK_TEXT = {
    rootcause.INFRASTRUCTURE: "infrastructure: retry, excluding the blamed nodes",
    rootcause.TRANSIENT: "transient: retry without excluding a node",
    rootcause.APPLICATION: "application: a deterministic error in the program; retried once, not again when it repeats",
}


def _finding(entry: dict[str, Any]) -> rootcause.Finding:
    stamp = entry.get("source_time")
    return rootcause.Finding(
        category=entry["category"],
        rule=entry["rule"],
        line=entry.get("text") or "",
        detail=entry.get("detail") or "",
        nodes=tuple(entry.get("nodes") or ()),
        rank=entry.get("rank"),
        xid=entry.get("xid"),
        source_time=dt.datetime.fromisoformat(stamp) if isinstance(stamp, str) else None,
        order=int(entry.get("line") or 0),
        first_observed=bool(entry.get("first_observed")),
    )


def diagnose(
    crashes: list[dict[str, Any]], *, attempt_nodes: Sequence[str] = (), tasks_per_node: str | None = None
) -> dict[str, Any]:
    """Root cause of the crash lines (annotating each with its outlook, role and blamed nodes)."""
    findings = [
        line_nodes.with_line_nodes(_finding(entry), attempt_nodes, tasks_per_node, entry.get("process_lines") or ())
        for entry in crashes
    ]
    cause = rootcause.analyse(findings, attempt_nodes=attempt_nodes, tasks_per_node=tasks_per_node)
    for entry, finding in zip(crashes, findings, strict=True):
        attribution = rootcause.attribute(finding, attempt_nodes=attempt_nodes, tasks_per_node=tasks_per_node)
        entry["nodes"] = list(finding.nodes)
        entry["outlook"] = rootcause.outlook_of_finding(finding)
        entry["role"] = "primary" if finding is cause.primary else "consequence"
        if finding is not cause.primary and rootcause.known_consequence(finding):
            entry["role"] = "known consequence"
        entry["blamed_nodes"] = [node.to_json() for node in attribution.blamed]
        entry["fingerprint"] = rootcause.fingerprint(finding.category, finding.detail or finding.line)
        entry["fingerprint_id"] = rootcause.fingerprint_id(entry["fingerprint"])
    first = cause.primary
    index = findings.index(first) if first is not None else None
    signature = rootcause.fingerprint(first.category, first.detail or first.line) if first is not None else None
    return {
        "crashed": first is not None,
        "primary_category": cause.category,
        "outlook": cause.outlook or "none",
        "blamed_nodes": [node.to_json() for node in cause.blamed],
        "xid": first.xid if first is not None else None,
        "rank": first.rank if first is not None else None,
        "root_cause": None
        if first is None or index is None
        else {
            "category": first.category,
            "rule": first.rule,
            "line": first.order,
            "text": crashes[index]["text"],
            "detail": first.detail,
            "signature": signature,
            "fingerprint": signature,
            "fingerprint_id": rootcause.fingerprint_id(signature),
            "node": cause.node,
            "nodes": list(first.nodes),
            "rank": first.rank,
            "consequences": len(cause.consequences),
            "notes": list(cause.notes),
        },
    }


def advisor_verdict(
    cause: dict[str, Any], checkpoints: list[dict[str, Any]], settings: Settings | None
) -> dict[str, Any]:
    """What the advisor would decide for a first attempt that crashed like this (default job policy)."""
    if not cause["crashed"]:
        return {"would_retry": None, "operation": None, "rule": None, "reason": "no crash signature: nothing to decide"}
    saved = [c for c in checkpoints if c["kind"] == "saved"]
    iterations = [c["iteration"] for c in saved if c["iteration"] is not None]
    site = (
        SitePolicy(
            max_requeue=settings.site_max_requeue,
            early_stop_failures=settings.early_stop_failures,
            straggler_enabled=settings.straggler_enabled,
            advice_ttl=settings.advice_ttl,
            stop_repeated_application_failures=settings.stop_repeated_application_failures,
        )
        if settings is not None
        else SitePolicy()
    )
    root = cause["root_cause"] or {}
    decision = decide(
        failure=Failure(
            attempt_index=0,
            kind=FailureKind.CRASH,
            category=cause["primary_category"],
            implicated_nodes=tuple(node["node"] for node in cause["blamed_nodes"]),
            outlook=cause["outlook"],
            signature=root.get("signature"),
            checkpoints_saved=len(saved),
            latest_checkpoint_iteration=max(iterations) if iterations else None,
        ),
        policy=JobPolicy(),
        site=site,
        now=dt.datetime.now(dt.UTC),
    )
    retry = decision.operation is Operation.RESTART
    note = ""
    if cause["outlook"] == rootcause.APPLICATION and retry and site.stop_repeated_application_failures:
        note = (
            " If the next attempt fails the same way at the same place, the advisor stops"
            " (rule application_failure_repeated)."
        )
    return {
        "would_retry": retry,
        "operation": decision.operation.value,
        "rule": decision.rule,
        "exclusions": list(decision.exclusions),
        "reason": decision.reason + note,
    }


def print_verdict(data: dict[str, Any], out: TextIO) -> None:
    """The verdict block at the top of check-log's text output."""
    w = out.write
    if not data["crashed"]:
        w("Verdict: no crash signature in this log\n\n")
        return
    root = data["root_cause"]
    where = f" on {root['node']}" if root.get("node") else ""
    rank = f", rank {root['rank']}" if root.get("rank") is not None else ""
    w(
        f"Root cause: {data['primary_category']} at line {root['line']} ({root['rule']}){where}{rank}\n"
        f"    {root['text']}\n"
    )
    w(f"Fingerprint: {root['fingerprint_id']} {root['fingerprint']}\n")
    if root["consequences"]:
        w(f"  {root['consequences']} more crash line(s) rank as consequences of it\n")
    w(f"Outlook: {_OUTLOOK_TEXT.get(data['outlook'], data['outlook'])}\n")
    if data["blamed_nodes"]:
        blamed = ", ".join(f"{n['node']} (from {n['provenance']})" for n in data["blamed_nodes"])
        w(f"Blamed nodes: {blamed}\n")
    else:
        w("Blamed nodes: none (only infrastructure evidence implicates a node)\n")
    for note in root["notes"]:
        w(f"  note: {note}\n")
    advisor = data["advisor"]
    answer = "yes" if advisor["would_retry"] else "no"
    w(f"Advisor would retry: {answer} ({advisor['operation']}, rule {advisor['rule']})\n    {advisor['reason']}\n\n")
