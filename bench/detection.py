"""Detection quality on the real-world corpus (tests/fixtures/realworld/, labels in labels.toml).

Runs the detectors exactly as `recovery check-log` does (app.authoring.log_check.build_report with the
default rule set) on every excerpt and compares with the labels:

    .venv/bin/python bench/detection.py            # every corpus, each scored on its own: tables + figure lines
    .venv/bin/python bench/detection.py --smoke    # the same (the corpora are small and fast), for CI
    .venv/bin/python bench/detection.py --json     # per-file results, for debugging
    .venv/bin/python bench/detection.py --only xid # files whose name contains "xid"
    .venv/bin/python bench/detection.py --corpus tests/fixtures/realworld-holdout2   # one corpus only

The corpora (CORPORA): ``realworld`` (tuned on), ``realworld-holdout`` to ``realworld-holdout5`` (held out: each
README records the figures measured before anyone tuned on it). With several
corpora the figure lines of the first keep their plain names and the others' carry the corpus tag
(``crash_recall_holdout2``); a corpus summary line (``corpora:``) counts excerpts, frameworks, blamed-node files,
distinct progress formats and checkpoint loads over all of them.

What it reads from the report dict (`recovery check-log --json` prints the same dict):

* ``crash_signatures``: list of {"category", "nodes", "rank", "xid", ...}; the crash verdict is
  ``report["crashed"]`` when the report has it, else "at least one crash signature".
* ``checkpoints``: list of {"kind", "iteration", ...}; the LAST one is compared with the label
  (``report["checkpoint_iteration"]``, when the report has it, overrides the iteration).
* ``progress``: {phase: {...}}; non-empty means progress markers were seen.
* ``hang_detector.armed`` (bool): the hang detector armed on a progress marker; the arming rate is the share of files
  labelled ``progress = true`` where it did; ``false_arming`` lists the crash-free files labelled ``progress = false``
  (logs that show no training progress) where it armed all the same.
* a ``checkpoints`` entry of kind "loaded": the load a file labelled ``checkpoint_load = true`` carries was seen.
* ``primary_category`` (str): the root-cause category of the failure.
* ``outlook`` (str): "infrastructure" | "transient" | "application" | "none".
* ``blamed_nodes`` (list of {"node", "provenance"}): the nodes the failure implicates.
* per crash signature ``xid`` (int); the root-cause Xid is ``report["xid"]`` when present, else the
  first signature that carries one. Likewise the root-cause ``rank``.

The last three top-level keys (and ``xid``) are also looked up under ``report["failure"]`` and
``report["root_cause"]``. A label's optional ``allocation`` (a Slurm hostlist, "node[1-4]") and
``tasks_per_node`` ("4(x2)") are passed to check-log as the attempt's node list and task layout (as
``recovery check-log --nodes ... --tasks-per-node ...`` does); the table splits the node figure into files whose
label has an ``allocation`` (the production path) and files scored from host names in the lines only.
A key the detectors do not produce yet
scores as a miss, so the figures light up as the detectors learn them. The "legacy" rows of the table
score what today's report already has (first crash signature's category, union of per-signature nodes) for comparison.

Ends with one `figure <name> <value> <unit> goal <op> <target>` line per goal. Makes no assertions.
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.authoring.log_check import build_report  # noqa: E402
from app.domain.detection.rules_builtin import default_ruleset  # noqa: E402
from app.slurm.names import expand_hostlist  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
CORPUS = FIXTURES / "realworld"
# tag -> folder; the first is the tuning corpus, whose figure lines keep their plain names.
CORPORA: dict[str, Path] = {
    "realworld": CORPUS,
    "holdout": FIXTURES / "realworld-holdout",
    "holdout2": FIXTURES / "realworld-holdout2",
    "holdout3": FIXTURES / "realworld-holdout3",
    "holdout4": FIXTURES / "realworld-holdout4",
    "holdout5": FIXTURES / "realworld-holdout5",
}

GOALS: tuple[tuple[str, str, str, float], ...] = (
    # name, unit, op, target
    ("crash_recall", "%", ">=", 97.0),
    ("primary_category_accuracy", "%", ">=", 90.0),
    ("false_crash_verdicts", "count", "<=", 0),
    ("node_extraction", "%", ">=", 90.0),
    ("xid_number", "%", ">=", 95.0),
    ("checkpoint_iteration", "%", ">=", 95.0),
    ("hang_armed", "%", ">=", 90.0),
    ("false_arming", "count", "<=", 0),
    ("checkpoint_load", "%", ">=", 95.0),
)


def load_labels(corpus: Path = CORPUS) -> list[dict[str, Any]]:
    """The label rows of labels.toml, in file order."""
    with open(corpus / "labels.toml", "rb") as handle:
        return list(tomllib.load(handle).get("file", []))


def _field(report: dict[str, Any], name: str) -> Any:
    """A new-API field: top level first, then under "failure" / "root_cause"."""
    if name in report:
        return report[name]
    for nested in ("failure", "root_cause"):
        holder = report.get(nested)
        if isinstance(holder, dict) and name in holder:
            return holder[name]
    return None


def _node_names(value: Any) -> set[str] | None:
    """blamed_nodes as a set of names (accepts dicts with "node"/"name", or plain strings)."""
    if value is None:
        return None
    names: set[str] = set()
    for entry in value:
        if isinstance(entry, str):
            names.add(entry)
        elif isinstance(entry, dict):
            name = entry.get("node") or entry.get("name")
            if name:
                names.add(str(name))
        else:
            name = getattr(entry, "node", None)
            if name:
                names.add(str(name))
    return names


@dataclass
class FileResult:
    name: str
    label: dict[str, Any]
    crashed: bool = False
    categories: list[str] = field(default_factory=list)
    primary: str | None = None
    legacy_primary: str | None = None
    outlook: str | None = None
    blamed: list[str] | None = None
    legacy_nodes: list[str] = field(default_factory=list)
    xid: int | None = None
    rank: int | None = None
    checkpoint_kind: str | None = None
    checkpoint_iteration: int | None = None
    progress: bool = False
    armed: bool = False
    loaded: bool = False
    error: str | None = None


def analyse(path: Path, label: dict[str, Any], ruleset: Any) -> FileResult:
    """Run check-log's analysis on one file and pull out what the labels can be compared with."""
    result = FileResult(name=path.name, label=label)
    try:
        # A label's `allocation` (Slurm hostlist) is the attempt's node list, as production knows it.
        report = build_report(
            str(path),
            ruleset,
            attempt_nodes=expand_hostlist(str(label.get("allocation") or "")),
            tasks_per_node=label.get("tasks_per_node"),
        )
    except Exception as exc:  # a detector crash on real input is a result too
        result.error = f"{type(exc).__name__}: {exc}"
        return result
    crashes = report.get("crash_signatures") or []
    verdict = report.get("crashed")
    result.crashed = bool(verdict) if verdict is not None else bool(crashes)
    result.categories = sorted({c["category"] for c in crashes})
    result.legacy_primary = crashes[0]["category"] if crashes else None
    result.legacy_nodes = sorted({n for c in crashes for n in (c.get("nodes") or [])})
    primary = _field(report, "primary_category")
    result.primary = primary if isinstance(primary, str) else None
    outlook = _field(report, "outlook")
    result.outlook = outlook if isinstance(outlook, str) else None
    blamed = _node_names(_field(report, "blamed_nodes"))
    result.blamed = sorted(blamed) if blamed is not None else None
    xid = _field(report, "xid")
    if not isinstance(xid, int):
        xid = next((c["xid"] for c in crashes if c.get("xid") is not None), None)
    result.xid = xid
    rank = _field(report, "rank")
    if not isinstance(rank, int):
        rank = next((c["rank"] for c in crashes if c.get("rank") is not None), None)
    result.rank = rank
    checkpoints = report.get("checkpoints") or []
    if checkpoints:
        result.checkpoint_kind = checkpoints[-1].get("kind")
        result.checkpoint_iteration = checkpoints[-1].get("iteration")
    iteration = _field(report, "checkpoint_iteration")
    if isinstance(iteration, int):
        result.checkpoint_iteration = iteration
    result.progress = bool(report.get("progress"))
    hang = report.get("hang_detector")
    result.armed = bool(hang.get("armed")) if isinstance(hang, dict) else False
    result.loaded = any(c.get("kind") == "loaded" for c in checkpoints)
    return result


def _pct(hits: int, total: int) -> float:
    return 100.0 * hits / total if total else 100.0


@dataclass
class Score:
    hits: int = 0
    total: int = 0
    misses: list[str] = field(default_factory=list)

    def add(self, ok: bool, name: str) -> None:
        self.total += 1
        if ok:
            self.hits += 1
        else:
            self.misses.append(name)

    @property
    def pct(self) -> float:
        return _pct(self.hits, self.total)


def score(results: list[FileResult]) -> dict[str, Any]:
    """All figures of the table, by name."""
    recall, precision, primary, legacy_primary = Score(), Score(), Score(), Score()
    nodes, legacy_nodes, xid, ckpt, ckpt_kind = Score(), Score(), Score(), Score(), Score()
    nodes_allocated, nodes_hosts_only = Score(), Score()
    outlook, rank, progress, armed, loads = Score(), Score(), Score(), Score(), Score()
    false_crash: list[str] = []
    false_arming: list[str] = []
    false_blame: list[str] = []
    per_cat: dict[str, Counter[str]] = {}
    for r in results:
        lab = r.label
        wanted = set(lab.get("categories", []))
        crashed = bool(wanted)
        if crashed:
            recall.add(r.crashed, r.name)
            primary.add(r.primary == lab.get("primary"), r.name)
            legacy_primary.add(r.legacy_primary == lab.get("primary"), r.name)
            outlook.add(r.outlook == lab.get("outlook"), r.name)
        elif r.crashed:
            false_crash.append(r.name)
        if r.crashed:
            precision.add(crashed, r.name)
        for cat in wanted | set(r.categories):
            counts = per_cat.setdefault(cat, Counter())
            if cat in wanted and cat in r.categories:
                counts["tp"] += 1
            elif cat in wanted:
                counts["fn"] += 1
            else:
                counts["fp"] += 1
        blame = set(lab.get("nodes", []))
        if blame:
            nodes.add(r.blamed is not None and set(r.blamed) == blame, r.name)
            # With an `allocation` the node list is matched as in production; without, host names in lines only.
            split = nodes_allocated if lab.get("allocation") else nodes_hosts_only
            split.add(r.blamed is not None and set(r.blamed) == blame, r.name)
            legacy_nodes.add(set(r.legacy_nodes) == blame, r.name)
        elif r.blamed:
            false_blame.append(r.name)
        if "xid" in lab:
            xid.add(r.xid == lab["xid"], r.name)
        if "checkpoint_iteration" in lab:
            ckpt.add(r.checkpoint_iteration == lab["checkpoint_iteration"], r.name)
        if "checkpoint_kind" in lab:
            ckpt_kind.add(r.checkpoint_kind == lab["checkpoint_kind"], r.name)
        if "rank" in lab and crashed:
            rank.add(r.rank == lab["rank"], r.name)
        progress.add(r.progress == bool(lab.get("progress")), r.name)
        if lab.get("progress"):
            armed.add(r.armed, r.name)
        elif r.armed and not crashed:
            false_arming.append(r.name)
        if lab.get("checkpoint_load"):
            loads.add(r.loaded, r.name)
    return {
        "files": len(results),
        "crashed_files": recall.total,
        "crash_free_files": len(results) - recall.total,
        "errors": [r.name for r in results if r.error],
        "crash_recall": recall,
        "crash_precision": precision,
        "primary_category_accuracy": primary,
        "legacy_first_category_accuracy": legacy_primary,
        "outlook_accuracy": outlook,
        "node_extraction": nodes,
        "node_extraction_with_allocation": nodes_allocated,
        "node_extraction_host_names_only": nodes_hosts_only,
        "legacy_signature_nodes": legacy_nodes,
        "false_node_blames": false_blame,
        "xid_number": xid,
        "checkpoint_iteration": ckpt,
        "checkpoint_kind": ckpt_kind,
        "rank": rank,
        "progress_markers": progress,
        "hang_armed": armed,
        "checkpoint_load": loads,
        "false_crash_verdicts": false_crash,
        "false_arming": false_arming,
        "per_category": per_cat,
    }


def print_table(figures: dict[str, Any], out: Any = sys.stdout, verbose: bool = False) -> None:
    w = out.write
    w(
        f"corpus: {figures['files']} files ({figures['crashed_files']} crashed, "
        f"{figures['crash_free_files']} crash-free); detector errors: {len(figures['errors'])}\n\n"
    )
    w(f"{'measure':<34} {'hits':>5} {'of':>5} {'value':>8}\n")
    rows = (
        "crash_recall",
        "crash_precision",
        "primary_category_accuracy",
        "legacy_first_category_accuracy",
        "outlook_accuracy",
        "node_extraction",
        "node_extraction_with_allocation",
        "node_extraction_host_names_only",
        "legacy_signature_nodes",
        "xid_number",
        "checkpoint_iteration",
        "checkpoint_kind",
        "rank",
        "progress_markers",
        "hang_armed",
        "checkpoint_load",
    )
    for name in rows:
        s: Score = figures[name]
        w(f"{name:<34} {s.hits:>5} {s.total:>5} {s.pct:>7.1f}%\n")
        if verbose and s.misses:
            w(f"    misses: {', '.join(s.misses)}\n")
    w(f"{'false_crash_verdicts':<34} {len(figures['false_crash_verdicts']):>5}\n")
    if figures["false_crash_verdicts"]:
        w(f"    {', '.join(figures['false_crash_verdicts'])}\n")
    w(f"{'false_arming':<34} {len(figures['false_arming']):>5}\n")
    if figures["false_arming"]:
        w(f"    {', '.join(figures['false_arming'])}\n")
    w(f"{'false_node_blames':<34} {len(figures['false_node_blames']):>5}\n")
    if verbose and figures["false_node_blames"]:
        w(f"    {', '.join(figures['false_node_blames'])}\n")
    w(f"\n{'category':<26} {'tp':>4} {'fn':>4} {'fp':>4} {'recall':>8} {'precision':>10}\n")
    for cat, c in sorted(figures["per_category"].items()):
        rec = _pct(c["tp"], c["tp"] + c["fn"])
        prec = _pct(c["tp"], c["tp"] + c["fp"])
        w(f"{cat:<26} {c['tp']:>4} {c['fn']:>4} {c['fp']:>4} {rec:>7.1f}% {prec:>9.1f}%\n")
    w("\n")


def print_figures(figures: dict[str, Any], out: Any = sys.stdout, tag: str = "") -> None:
    """One figure line per goal; `tag` (a corpus tag) is appended to each name when given."""
    for name, unit, op, target in GOALS:
        value = figures[name]
        shown = f"{len(value)}" if isinstance(value, list) else f"{value.pct:.1f}"
        target_shown = f"{target:g}"
        out.write(f"figure {name}{'_' + tag if tag else ''} {shown} {unit} goal {op} {target_shown}\n")


def corpus_stats(labels: list[dict[str, Any]]) -> dict[str, int]:
    """What the corpus holds (issue 24's size goals): excerpts, frameworks, blamed-node files, formats, loads."""
    return {
        "excerpts": len(labels),
        "frameworks": len({row["framework"] for row in labels}),
        "blamed_node_files": sum(1 for row in labels if row.get("nodes")),
        "progress_formats": len({row["progress_format"] for row in labels if row.get("progress_format")}),
        "checkpoint_load_files": sum(1 for row in labels if row.get("checkpoint_load")),
    }


def corpus_tag(corpus: Path) -> str:
    """The tag of a known corpus folder, else a tag made from its folder name."""
    for tag, path in CORPORA.items():
        if path.resolve() == corpus.resolve():
            return tag
    return "".join(ch if ch.isalnum() else "_" for ch in corpus.name.lower()).strip("_") or "corpus"


def run(corpus: Path, only: str | None = None) -> list[FileResult]:
    ruleset = default_ruleset()
    results = []
    for label in load_labels(corpus):
        if only and only not in label["name"]:
            continue
        results.append(analyse(corpus / label["name"], label, ruleset))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="CI mode: the whole corpus (it is fast)")
    parser.add_argument("--json", action="store_true", help="dump per-file results as JSON (then the figures)")
    parser.add_argument("--verbose", "-v", action="store_true", help="list the files each measure misses")
    parser.add_argument("--only", help="only files whose name contains this")
    parser.add_argument(
        "--corpus", type=Path, action="append", help="score only this corpus folder (repeatable); default: every corpus"
    )
    args = parser.parse_args(argv)
    corpora = args.corpus or [path for path in CORPORA.values() if (path / "labels.toml").exists()]
    scored = []
    for corpus in corpora:
        results = run(corpus, args.only)
        figures = score(results)
        scored.append((corpus, figures))
        if args.json:
            json.dump([r.__dict__ for r in results], sys.stdout, indent=1, default=str)
            sys.stdout.write("\n")
        else:
            shown = corpus.resolve().relative_to(ROOT) if corpus.resolve().is_relative_to(ROOT) else corpus
            sys.stdout.write(f"== {corpus_tag(corpus)} ({shown})\n")
            print_table(figures, verbose=args.verbose)
    stats = corpus_stats([row for corpus in corpora for row in load_labels(corpus)])
    sys.stdout.write("corpora: " + ", ".join(f"{key} {value}" for key, value in stats.items()) + "\n")
    for index, (corpus, figures) in enumerate(scored):
        print_figures(figures, tag="" if index == 0 else corpus_tag(corpus))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
