"""`recovery check-policy '<json>'`: tell a job author whether a comment would enrol their job, and why."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from app.authoring.target import Target
from app.domain.admission.mode import ModeDecision, Requested, admission, effective_mode
from app.domain.admission.policy import PolicyResult, parse_comment
from app.domain.admission.sbatch import DirectiveSyntaxError, split_arguments
from app.infra.config import Settings

EXIT_ENROLLED, EXIT_NOT_ENROLLED, EXIT_USAGE = 0, 1, 2

_LABEL_WIDTH = 44


def comment_from_input(text: str) -> str:
    """Accept the bare JSON, or a pasted `#SBATCH --comment=...` / `--comment '...'` line."""
    stripped = text.strip()
    if stripped.startswith("#SBATCH"):
        stripped = stripped[len("#SBATCH") :]
    elif not stripped.startswith("--comment"):
        return text
    try:
        args = split_arguments(stripped)
    except DirectiveSyntaxError:
        return text
    for index, arg in enumerate(args):
        if arg.startswith("--comment="):
            return arg[len("--comment=") :]
        if arg == "--comment" and index + 1 < len(args):
            return args[index + 1]
    return text


@dataclass(frozen=True)
class _PartitionKnown:
    """The operator's settings for a check that decided the partition question itself (or knows no partition)."""

    settings: Settings
    managed: bool

    @property
    def acknowledge_scheduler_actions(self) -> bool:
        return self.settings.acknowledge_scheduler_actions

    def partition_managed(self, partition: str | None) -> bool:
        return self.managed


def policy_mode(result: PolicyResult, settings: Settings, *, partition_managed: bool = True) -> ModeDecision:
    """The mode the policy would run under now (the domain's effective_mode); without a partition: managed."""
    requested = result.policy.mode if result.policy and "mode" in result.given else None
    return effective_mode(Requested(requested, None), _PartitionKnown(settings, partition_managed))


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


def _row(label: str, value: str, given: bool) -> str:
    mark = "*" if given else " "
    return f"  {label:<{_LABEL_WIDTH}} {mark} {value}"


def render_policy(result: PolicyResult, settings: Settings) -> list[str]:
    """The effective policy as aligned lines, marking the values the author set with '*'."""
    if result.policy is None:
        return []
    policy = result.policy.to_dict()
    given = set(result.given)
    lines = [f"Effective policy under {result.wrapper} (* = set in the comment; the rest are defaults):"]
    for key, value in policy.items():
        if key == "anomaly_detection_config":
            continue
        shown = _fmt(value)
        if key == "workflow_id" and value is None:
            shown = "(not set: derived from the job id)"
        elif key == "max_requeue_times":
            ceiling = settings.site_max_requeue
            if value is None:
                shown = f"(not set: the site ceiling of {ceiling} applies)"
            else:
                shown = (
                    f"{value}  (effective retry limit: min({value}, site ceiling {ceiling}) = {min(value, ceiling)})"
                )
        lines.append(_row(key, shown, key in given))
    lines.append("  anomaly_detection_config:")
    for key, value in policy["anomaly_detection_config"].items():
        shown = _fmt(value)
        if key.startswith("log_based_timeout_threshold") and isinstance(value, int) and not isinstance(value, bool):
            shown = f"{value} s"
        if key == "straggler_detection_enabled" and value is True and not settings.straggler_enabled:
            shown += "  (the operator's straggler switch is off, so slowdowns are not acted on)"
        if key == "log_based_timeout_enabled" and value is False:
            shown += "  (no-output hang anomalies are suppressed; other detectors still run)"
        lines.append(_row("  " + key, shown, f"anomaly_detection_config.{key}" in given))
    return lines


def write_policy(out: TextIO, result: PolicyResult, settings: Settings, *, heading: str) -> bool:
    """Write the policy's problems under `heading`, then its effective values; True when it has values."""
    issues = render_issues(result)
    if issues:
        out.write(f"\n{heading}:\n" + "\n".join(issues) + "\n")
    policy_lines = render_policy(result, settings)
    if policy_lines:
        out.write("\n" + "\n".join(policy_lines) + "\n")
    return bool(policy_lines)


def render_issues(result: PolicyResult) -> list[str]:
    lines = []
    for issue in result.errors:
        lines.append(f"  error    {issue.path}: {issue.message}")
    for issue in result.warnings:
        lines.append(f"  warning  {issue.path}: {issue.message}")
    return lines


def run(
    argv_text_or_path: str | None,
    *,
    as_json: bool,
    settings: Settings,
    out: TextIO = sys.stdout,
    target: Callable[[str], Target] | None = None,
) -> int:
    """Check a policy comment; exit 0 if it would enrol the job, 1 if not, 2 on a usage error.

    `target(comment)` resolves the installation to judge against (app.authoring.target); without it, `settings`."""
    text = argv_text_or_path
    if text == "-":
        text = sys.stdin.read()
    if text is None or not text.strip():
        message = (
            "check-policy needs the comment text, e.g. recovery check-policy '{\"APS\": {...}}' (or - to read stdin)"
        )
        if as_json:
            out.write(json.dumps({"error": message}) + "\n")
        else:
            out.write(f"usage error: {message}\n")
        return EXIT_USAGE

    comment = comment_from_input(text)
    judged = target(comment) if target is not None else Target(settings, "these settings", True)
    settings = judged.settings
    result = parse_comment(comment)
    # The partition is not known from a comment alone; check-script checks it.
    decision = admission(result, environment=settings.environment, partition_managed=True)
    mode = policy_mode(result, settings)
    code = EXIT_ENROLLED if decision.enrolled else EXIT_NOT_ENROLLED

    if as_json:
        payload = {
            "enrolled": decision.enrolled,
            "admission": decision.to_dict(),
            "policy_result": result.to_dict(),
            "mode": mode.to_dict() if result.valid else None,
            "operator": {
                "environment": settings.environment,
                "site_max_requeue": settings.site_max_requeue,
                "acknowledge_scheduler_actions": settings.acknowledge_scheduler_actions,
            },
            "partition_checked": False,
            "judged_against": judged.to_dict(),
        }
        out.write(json.dumps(payload, indent=2) + "\n")
        return code

    if decision.enrolled:
        out.write(
            f"VERDICT: would be ENROLLED in environment {settings.environment!r} "
            "(the partition is not checked here; run `recovery check-script` on the batch script)\n"
        )
    else:
        out.write(f"VERDICT: NOT ENROLLED ({decision.status}) - {decision.reason}\n")
    out.write(judged.sentence() + "\n")
    unknown = [w for w in result.warnings if "did you mean" in w.message]
    if unknown:
        out.write(f"{len(unknown)} key(s) are not recognised and are ignored: their defaults apply (see Problems).\n")
    if write_policy(out, result, settings, heading="Problems"):
        out.write(f"\nEffective mode: {mode.mode} - {mode.reason}.\n")
    return code
