"""`recovery check-script train.sbatch`: will this batch script's job be enrolled, and what will trip it up?"""

from __future__ import annotations

import json
import re
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from app.authoring.policy_check import (
    EXIT_ENROLLED,
    EXIT_NOT_ENROLLED,
    EXIT_USAGE,
    policy_mode,
    write_policy,
)
from app.authoring.target import Target
from app.domain.admission.mode import UNMANAGED_PARTITION, Admission, admission
from app.domain.admission.policy import PolicyResult, parse_comment
from app.domain.admission.sbatch import BatchScript, parse_script, python_buffering_risks
from app.infra.config import Settings

_WIDTH = 100  # wrap problem text for a terminal

MAX_SCRIPT_BYTES = 4 * 1024 * 1024  # sbatch itself refuses batch scripts of more than a few MB

# A path component that differs per job: %j (job id) or, for array jobs, %A together with %a.
_PER_JOB = re.compile(r"%j|%A.*%a|%a.*%A")
# A redirection or output option somewhere in the body, for spotting per-attempt log files.
_REDIRECT = re.compile(r">|\btee\b|--output|--error|\s-o\s|\s-e\s")


@dataclass(frozen=True)
class Problem:
    """One finding for the author: severity (error/warning/info), a stable code, line, and advice."""

    severity: str
    code: str
    message: str
    line: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"severity": self.severity, "code": self.code, "line": self.line, "message": self.message}


def _partition_status(script: BatchScript, settings: Settings) -> tuple[str | None, bool, str]:
    """(partition, managed, sentence) for the script's --partition, or the default partition."""
    partition = script.value("partition")
    managed_list = ", ".join(settings.managed_partitions)
    if partition:
        managed = settings.partition_managed(partition)
        verb = "is" if managed else "is NOT"
        return (
            partition,
            managed,
            f"partition {partition!r} {verb} managed by this installation (managed: {managed_list})",
        )
    if "*" in settings.managed_partitions:
        return None, True, "no --partition: the cluster's default partition is used, and every partition is managed"
    return (
        None,
        False,
        (
            f"no --partition: the cluster's default partition is used and this tool cannot tell whether it is one of "
            f"the managed partitions ({managed_list}); add #SBATCH --partition=<one of them>"
        ),
    )


def _log_paths(script: BatchScript) -> dict[str, Any]:
    output = script.last("output")
    error = script.last("error")
    array = script.value("array") is not None
    default = "slurm-%A_%a.out" if array else "slurm-%j.out"
    stdout = output.value if output and output.value else default
    return {
        "stdout": stdout,
        "stdout_source": f"--output (line {output.line})" if output else "Slurm default",
        "stderr": error.value if error and error.value else stdout,
        "stderr_source": f"--error (line {error.line})" if error else "same file as stdout",
        "stdout_line": output.line if output else 0,
        "stderr_line": error.line if error else (output.line if output else 0),
        "open_mode": script.value("open-mode"),
    }


def _writes_per_attempt_files(script: BatchScript) -> bool:
    body = script.body
    return "SLURM_RESTART_COUNT" in body and _REDIRECT.search(body) is not None


def _problems(script: BatchScript, result: PolicyResult, logs: dict[str, Any], settings: Settings) -> list[Problem]:
    problems = [Problem(n.severity, "sbatch", n.message, n.line) for n in script.notes]

    comments = script.all("comment")
    if not comments:
        problems.append(
            Problem(
                "error",
                "no-comment",
                "no #SBATCH --comment: the job carries no policy. Add #SBATCH --comment='{\"APS\":{...}}'",
            )
        )
    elif len(comments) > 1:
        problems.append(
            Problem(
                "warning",
                "comment-repeated",
                f"--comment is given {len(comments)} times; only the last one (line {comments[-1].line}) counts",
                comments[-1].line,
            )
        )

    requeue = script.requeue
    if requeue is None:
        problems.append(
            Problem(
                "warning",
                "no-requeue-flag",
                "no #SBATCH --requeue: whether Slurm may requeue this job follows the site's JobRequeue default. "
                "Add #SBATCH --requeue to make it explicit.",
            )
        )
    elif requeue is False:
        line = script.last("no-requeue")
        problems.append(
            Problem(
                "error",
                "no-requeue",
                "--no-requeue forbids requeueing this job: recovery can record Advice but the "
                "controller cannot restart it. "
                "Replace it with #SBATCH --requeue.",
                line.line if line else 0,
            )
        )

    shared_ok = bool(result.policy and result.policy.log_file_paths_shared_across_attempts)
    per_attempt = _writes_per_attempt_files(script)
    for stream in ("stdout", "stderr"):
        path = logs[stream]
        if stream == "stderr" and path == logs["stdout"]:
            continue
        if not _PER_JOB.search(path):
            problems.append(
                Problem(
                    "warning",
                    "path-not-per-job",
                    f"{stream} path {path!r} has no %j: every job you submit with this script writes the same file, "
                    "so their logs mix. Put %j in the file name (e.g. logs/train-%j.out).",
                    logs[f"{stream}_line"],
                )
            )
    if result.policy is not None and not shared_ok and not per_attempt:
        mode = logs["open_mode"]
        extra = ""
        if mode == "append":
            extra = " With --open-mode=append every attempt appends to the same file."
        elif mode == "truncate":
            extra = (
                " With --open-mode=truncate a later attempt also overwrites the earlier "
                "attempt's output (its evidence)."
            )
        problems.append(
            Problem(
                "warning",
                "path-shared-across-attempts",
                f"every attempt of this job writes {logs['stdout']!r}: Slurm has no %-pattern for the "
                f"restart count, and a "
                f"requeue keeps the job id, so the file name does not identify the attempt.{extra} Either add "
                '"log_file_paths_shared_across_attempts": true to the APS object (then emit slurm_job_attempt or '
                "keep source timestamps), or write per-attempt files, e.g. "
                'exec >"logs/train-${SLURM_JOB_ID}-${SLURM_RESTART_COUNT:-0}.out" 2>&1',
                logs["stdout_line"],
            )
        )
    if per_attempt and not shared_ok:
        problems.append(
            Problem(
                "info",
                "per-attempt-files",
                "the script appears to write per-attempt files using $SLURM_RESTART_COUNT; make sure they are in a "
                "directory the operator's collector reads.",
            )
        )
    if logs["open_mode"] == "truncate" and shared_ok:
        problems.append(
            Problem(
                "warning",
                "truncate-shared",
                "--open-mode=truncate with log_file_paths_shared_across_attempts: a later attempt "
                "overwrites the shared "
                "file, losing the earlier attempt's evidence. Use --open-mode=append.",
                getattr(script.last("open-mode"), "line", 0),
            )
        )

    for risk in python_buffering_risks(script):
        problems.append(Problem("warning", "python-buffering", risk.message, risk.line))
    return problems


def _verdict(result: PolicyResult, script: BatchScript, settings: Settings) -> tuple[Admission, str | None, bool, str]:
    partition, managed, partition_text = _partition_status(script, settings)
    decision = admission(result, environment=settings.environment, partition_managed=managed)
    if decision.enrolled and any(n.refused for n in script.notes):
        decision = Admission(
            "SBATCH_WOULD_REFUSE",
            "sbatch would refuse this script (see the errors below), so there would be no job to enrol.",
        )
    if decision.status == UNMANAGED_PARTITION:
        decision = Admission(
            UNMANAGED_PARTITION, partition_text[0].upper() + partition_text[1:] + "; the job is not enrolled."
        )
    return decision, partition, managed, partition_text


def check(text: str, settings: Settings, *, name: str = "script") -> dict[str, Any]:
    """Everything check-script reports, as plain data (the text and JSON outputs both render this)."""
    script = parse_script(text)
    comment = script.value("comment")
    result = parse_comment(comment)
    decision, partition, managed, partition_text = _verdict(result, script, settings)
    mode = policy_mode(result, settings, partition_managed=managed)
    logs = _log_paths(script)
    problems = _problems(script, result, logs, settings)
    requeue = script.requeue
    return {
        "file": name,
        "enrolled": decision.enrolled,
        "admission": decision.to_dict(),
        "partition": {"name": partition, "managed": managed, "explanation": partition_text},
        "policy_result": result.to_dict(),
        "mode": mode.to_dict() if result.valid else None,
        "requeue": {True: "requeue", False: "no-requeue", None: "site default (JobRequeue)"}[requeue],
        "logs": logs,
        "problems": [p.to_dict() for p in problems],
        "directives": [{"line": o.line, "option": o.name, "value": o.value} for o in script.options],
        "_result": result,
    }


def _render_text(report: dict[str, Any], settings: Settings, out: TextIO, judged_line: str = "") -> None:
    admission_ = report["admission"]
    if report["enrolled"]:
        out.write(
            f"VERDICT: would be ENROLLED - environment {settings.environment!r} matches; "
            f"{report['partition']['explanation']}\n"
        )
    else:
        out.write(f"VERDICT: NOT ENROLLED ({admission_['status']}) - {admission_['reason']}\n")
    out.write(f"Script: {report['file']}\n")
    if judged_line:
        out.write(judged_line + "\n")

    result: PolicyResult = report["_result"]
    write_policy(out, result, settings, heading="Policy problems")
    if report["mode"]:
        out.write(f"\nEffective mode: {report['mode']['mode']} - {report['mode']['reason']}.\n")

    logs = report["logs"]
    out.write(f"\nRequeue: {report['requeue']}\n")
    out.write(f"Partition: {report['partition']['explanation']}\n")
    out.write(
        f"Logs: stdout {logs['stdout']} ({logs['stdout_source']}); stderr {logs['stderr']} ({logs['stderr_source']})\n"
    )

    problems = report["problems"]
    if problems:
        counts = {s: sum(1 for p in problems if p["severity"] == s) for s in ("error", "warning", "info")}
        summary = ", ".join(f"{n} {s}{'s' if n != 1 else ''}" for s, n in counts.items() if n)
        out.write(f"\nScript problems ({summary}):\n")
        for p in problems:
            where = f"line {p['line']}" if p["line"] else "script"
            lead = f"  {p['severity']:<8} {where:<9} "
            wrapped = textwrap.wrap(
                p["message"],
                width=_WIDTH,
                initial_indent=lead,
                subsequent_indent=" " * len(lead),
                break_long_words=False,
                break_on_hyphens=False,
            )
            out.write("\n".join(wrapped) + "\n")
    else:
        out.write("\nNo script problems found.\n")
    out.write(
        "\nNote: options given on the sbatch command line or in SBATCH_* environment variables "
        "override these directives.\n"
    )


def run(
    argv_text_or_path: str | None,
    *,
    as_json: bool,
    settings: Settings,
    out: TextIO = sys.stdout,
    target: Callable[[str | None], Target] | None = None,
) -> int:
    """Check a batch script file; exit 0 if its job would be enrolled, 1 if not, 2 on a usage error.

    `target(comment)` resolves the installation to judge against (app.authoring.target); without it, `settings`."""

    def usage(message: str) -> int:
        out.write((json.dumps({"error": message}) if as_json else f"usage error: {message}") + "\n")
        return EXIT_USAGE

    if not argv_text_or_path:
        return usage("check-script needs the path of a batch script, e.g. recovery check-script train.sbatch")
    path = Path(argv_text_or_path)
    try:
        if not path.exists():
            return usage(f"{path}: no such file")
        if not path.is_file():
            return usage(f"{path}: not a regular file")
        if path.stat().st_size > MAX_SCRIPT_BYTES:
            return usage(f"{path}: larger than {MAX_SCRIPT_BYTES} bytes; not a batch script")
        raw = path.read_bytes()
    except OSError as exc:
        return usage(f"{path}: cannot read ({exc.strerror or exc})")
    text = raw.decode("utf-8", errors="replace")

    comment = parse_script(text).value("comment")
    judged = target(comment) if target is not None else Target(settings, "these settings", True)
    settings = judged.settings
    report = check(text, settings, name=str(path))
    code = EXIT_ENROLLED if report["enrolled"] else EXIT_NOT_ENROLLED
    if as_json:
        payload = {k: v for k, v in report.items() if not k.startswith("_")}
        payload["judged_against"] = judged.to_dict()
        out.write(json.dumps(payload, indent=2) + "\n")
    else:
        _render_text(report, settings, out, judged.sentence())
    return code
