"""Parse and validate the recovery policy (APS) that a job carries in its Slurm comment (SPEC §2)."""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

# Outcomes of reading a comment.
NO_POLICY = "NO_POLICY"  # not an enrolment attempt: ordinary text, unwrapped policy, no wrapper
INVALID = "INVALID"  # an attempt to enrol that failed to parse or validate (audited, shown)
VALID = "VALID"  # a wrapped policy that validated; `policy` holds every effective value

WRAPPERS = ("APS", "HEIMDALL")
MODES = ("observe", "act")
AUTO_RESUME_MODES = ("requeue", "singleton_dependency")

# Larger than any sensible retry count or threshold, small enough for a 32-bit DB column
# and for timedelta arithmetic downstream.
MAX_INT = 2_147_483_647
# Slurm stores comments as text; anything this long is not a policy and is not worth parsing.
MAX_COMMENT_CHARS = 1_000_000


def _flag(value: Any, default: bool) -> bool:
    return value if isinstance(value, bool) else default


def _count(value: Any, default: int | None, *, minimum: int) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and minimum <= value <= MAX_INT
    return value if ok else default


def _word(value: Any, options: tuple[str, ...], default: str) -> str:
    return value if isinstance(value, str) and value in options else default


def _name(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


@dataclass(frozen=True)
class AnomalyDetectionConfig:
    """`anomaly_detection_config`: the detectors' switches and the hang thresholds (seconds), with their defaults."""

    log_based_timeout_enabled: bool = True
    log_based_timeout_threshold_pretraining: int = 960
    log_based_timeout_threshold_trainingloop: int = 840
    straggler_detection_enabled: bool = False
    unknown_keys: Mapping[str, Any] = field(default_factory=dict)  # kept as written, not used

    def to_dict(self) -> dict[str, Any]:
        """The JSON object as stored and shown: every known key (defaults filled in), then unknown keys."""
        known = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "unknown_keys"}
        return {**known, **{k: v for k, v in self.unknown_keys.items() if k not in known}}

    @classmethod
    def from_dict(cls, data: Any) -> AnomalyDetectionConfig:
        """From stored JSON, leniently: a missing or malformed value is its default."""
        if not isinstance(data, Mapping):
            return cls()
        d = cls()
        return cls(
            log_based_timeout_enabled=_flag(data.get("log_based_timeout_enabled"), d.log_based_timeout_enabled),
            log_based_timeout_threshold_pretraining=_count(
                data.get("log_based_timeout_threshold_pretraining"),
                d.log_based_timeout_threshold_pretraining,
                minimum=1,
            )
            or d.log_based_timeout_threshold_pretraining,
            log_based_timeout_threshold_trainingloop=_count(
                data.get("log_based_timeout_threshold_trainingloop"),
                d.log_based_timeout_threshold_trainingloop,
                minimum=1,
            )
            or d.log_based_timeout_threshold_trainingloop,
            straggler_detection_enabled=_flag(data.get("straggler_detection_enabled"), d.straggler_detection_enabled),
            unknown_keys={k: v for k, v in data.items() if k not in ANOMALY_KEYS},
        )


@dataclass(frozen=True)
class EffectivePolicy:
    """The policy a job runs under: what the author wrote, every other key at its default (the one place of them).

    workflow_id None: the caller derives a workflow from the job id. max_requeue_times None: the job
    asked for no limit of its own, so the site ceiling applies.
    """

    workflow_id: str | None = None
    environment: str | None = None
    mode: str = "observe"
    auto_resume_mode: str = "requeue"
    max_requeue_times: int | None = None
    log_file_paths_shared_across_attempts: bool = False
    anomaly_detection_config: AnomalyDetectionConfig = field(default_factory=AnomalyDetectionConfig)
    unknown_keys: Mapping[str, Any] = field(default_factory=dict)  # kept as written, not used

    def to_dict(self) -> dict[str, Any]:
        """The JSON object as stored and shown: every known key (defaults filled in), then unknown keys."""
        known: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "unknown_keys"}
        known["anomaly_detection_config"] = self.anomaly_detection_config.to_dict()
        return {**known, **{k: v for k, v in self.unknown_keys.items() if k not in known}}

    @classmethod
    def from_dict(cls, data: Any) -> EffectivePolicy:
        """From stored JSON (a Policy row's `effective`), leniently: a missing or malformed value is its default."""
        if not isinstance(data, Mapping):
            return cls()
        d = cls()
        return cls(
            workflow_id=_name(data.get("workflow_id")),
            environment=data.get("environment") if isinstance(data.get("environment"), str) else None,
            mode=_word(data.get("mode"), MODES, d.mode),
            auto_resume_mode=_word(data.get("auto_resume_mode"), AUTO_RESUME_MODES, d.auto_resume_mode),
            max_requeue_times=_count(data.get("max_requeue_times"), None, minimum=0),
            log_file_paths_shared_across_attempts=_flag(
                data.get("log_file_paths_shared_across_attempts"), d.log_file_paths_shared_across_attempts
            ),
            anomaly_detection_config=AnomalyDetectionConfig.from_dict(data.get("anomaly_detection_config")),
            unknown_keys={k: v for k, v in data.items() if k not in POLICY_KEYS},
        )


POLICY_KEYS = frozenset(f.name for f in fields(EffectivePolicy) if f.name != "unknown_keys")
ANOMALY_KEYS = frozenset(f.name for f in fields(AnomalyDetectionConfig) if f.name != "unknown_keys")


# Words that make free text look like an attempt to enrol.  Upper-case APS must stand alone
# ("MAPS" or "APS_X" is not it); lower-case only counts next to JSON-ish punctuation.
_UPPER_MARKER = re.compile(r"(?<![A-Za-z0-9_])(APS|HEIMDALL)(?![A-Za-z0-9_])")
_ANYCASE_MARKER = re.compile(r"(?i)(?<![a-z0-9_])(aps|heimdall)(?![a-z0-9_])")


@dataclass(frozen=True)
class Issue:
    """One validation finding, located by a JSON path such as `$.APS.mode`."""

    path: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message}

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass(frozen=True)
class PolicyResult:
    """What a job comment says about enrolment: status, effective policy, findings, reason."""

    status: str
    reason: str
    wrapper: str | None = None
    policy: EffectivePolicy | None = None
    warnings: tuple[Issue, ...] = ()
    errors: tuple[Issue, ...] = ()
    # Dotted names of the keys the author actually wrote (the rest of `policy` are defaults).
    given: tuple[str, ...] = ()

    @property
    def valid(self) -> bool:
        return self.status == VALID

    @property
    def is_attempt(self) -> bool:
        """True when the comment tried to enrol (VALID or INVALID): such failures are audited."""
        return self.status != NO_POLICY

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "reason": self.reason,
            "wrapper": self.wrapper,
            "policy": self.policy.to_dict() if self.policy is not None else None,
            "warnings": [w.to_dict() for w in self.warnings],
            "errors": [e.to_dict() for e in self.errors],
            "given": list(self.given),
        }


class _Object(dict[str, Any]):
    """A decoded JSON object that remembers which of its keys were given more than once."""

    duplicates: tuple[str, ...] = ()


def _object_hook(pairs: list[tuple[str, Any]]) -> _Object:
    obj = _Object()
    seen: list[str] = []
    for key, value in pairs:
        if key in obj and key not in seen:
            seen.append(key)
        obj[key] = value
    obj.duplicates = tuple(seen)
    return obj


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _decode(text: str) -> Any:
    """Strict JSON: no NaN/Infinity, duplicate keys remembered; raises ValueError on any failure."""
    try:
        return json.loads(text, object_pairs_hook=_object_hook, parse_constant=_reject_constant)
    except RecursionError:
        raise ValueError("the JSON is nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    except (ValueError, TypeError, OverflowError) as exc:
        # int() digit limits, parse_constant rejections, float overflow
        raise ValueError(str(exc) or type(exc).__name__) from None


def _path(parent: str, key: str) -> str:
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        return f"{parent}.{key}"
    return f"{parent}[{json.dumps(key)}]"


def _describe(value: Any) -> str:
    """A short human rendering of a JSON value, for error messages."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return "an object" if isinstance(value, dict) else "an array"
    try:
        text = json.dumps(value)
    except (ValueError, TypeError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class _Validator:
    """Collects errors and warnings while building the effective policy."""

    def __init__(self) -> None:
        self.errors: list[Issue] = []
        self.warnings: list[Issue] = []
        self.given: list[str] = []

    def error(self, path: str, message: str) -> None:
        self.errors.append(Issue(path, message))

    def warn(self, path: str, message: str) -> None:
        self.warnings.append(Issue(path, message))

    def duplicates(self, obj: Any, path: str) -> None:
        for key in getattr(obj, "duplicates", ()):
            self.error(_path(path, key), "key is given more than once; keep exactly one")

    def boolean(self, value: Any, path: str) -> bool | None:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in {"true", "false"}:
            self.error(
                path, f"must be a JSON boolean (true or false without quotes), not the string {_describe(value)}"
            )
        else:
            self.error(path, f"must be a JSON boolean (true or false), got {_describe(value)}")
        return None

    def integer(self, value: Any, path: str, *, minimum: int, what: str) -> int | None:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            self.error(path, f"must be {what}, got {_describe(value)}")
            return None
        if isinstance(value, str):
            hint = " without quotes" if re.fullmatch(r"\s*-?\d+\s*", value) else ""
            self.error(path, f"must be {what}{hint}, not the string {_describe(value)}")
            return None
        if isinstance(value, float):
            # 1.0 is rejected too: the policy is read by people, so one spelling per value.
            shown = _describe(value) if math.isfinite(value) else "a non-finite number"
            self.error(path, f"must be {what} (a whole number without a decimal point), got {shown}")
            return None
        if value < minimum:
            self.error(path, f"must be {what}, got {value}")
            return None
        if value > MAX_INT:
            self.error(path, f"must be at most {MAX_INT}, got a larger number")
            return None
        return value

    def text(self, value: Any, path: str) -> str | None:
        if not isinstance(value, str):
            self.error(path, f"must be a string, got {_describe(value)}")
            return None
        if not value.strip():
            self.error(path, "must not be empty")
            return None
        return value

    def choice(self, value: Any, path: str, options: tuple[str, ...]) -> str | None:
        allowed = " or ".join(f'"{o}"' for o in options)
        if not isinstance(value, str):
            self.error(path, f"must be one of {allowed}, got {_describe(value)}")
            return None
        if value not in options:
            hint = " (values are lower-case)" if value.lower() in options else ""
            self.error(path, f"must be one of {allowed}, got {_describe(value)}{hint}")
            return None
        return value


def unknown_key_message(key: str, defaults: Mapping[str, Any], *, given: Mapping[str, Any]) -> str:
    """ "unknown key; kept but not used", with the nearest known key and the default used instead of it."""
    text = "unknown key; kept but not used"
    known = [k for k in defaults if k not in given]
    match = difflib.get_close_matches(key, known, n=1, cutoff=0.75) or difflib.get_close_matches(
        key.lower().replace("-", "_"), known, n=1, cutoff=0.75
    )
    if not match:
        return text
    nearest = match[0]
    default = defaults[nearest]
    shown = "null" if default is None else json.dumps(default) if not isinstance(default, dict) else "its defaults"
    if nearest == "max_requeue_times" and default is None:
        shown += " (the site ceiling applies)"
    return f"{text}; did you mean {nearest}? Without it, {nearest} takes its default {shown}"


def _validate_anomaly_config(v: _Validator, raw: Any, path: str) -> dict[str, Any]:
    config = AnomalyDetectionConfig().to_dict()
    if not isinstance(raw, dict):
        v.error(path, f"must be an object, got {_describe(raw)}")
        return config
    v.duplicates(raw, path)
    for key, value in raw.items():
        key_path = _path(path, key)
        v.given.append(f"anomaly_detection_config.{key}")
        checked: bool | int | None
        if key in ("log_based_timeout_enabled", "straggler_detection_enabled"):
            checked = v.boolean(value, key_path)
        elif key in ("log_based_timeout_threshold_pretraining", "log_based_timeout_threshold_trainingloop"):
            checked = v.integer(value, key_path, minimum=1, what="a positive integer number of seconds")
        else:
            v.warn(key_path, unknown_key_message(key, AnomalyDetectionConfig().to_dict(), given=raw))
            config[key] = value
            continue
        if checked is not None:
            config[key] = checked
    return config


def _validate_policy(v: _Validator, raw: Any, path: str) -> dict[str, Any]:
    policy = EffectivePolicy().to_dict()
    if not isinstance(raw, dict):
        v.error(path, f"the policy must be a JSON object, got {_describe(raw)}")
        return policy
    v.duplicates(raw, path)
    for key, value in raw.items():
        key_path = _path(path, key)
        v.given.append(key)
        if key == "workflow_id":
            checked: Any = v.text(value, key_path)
        elif key == "environment":
            checked = v.text(value, key_path)
        elif key == "mode":
            checked = v.choice(value, key_path, MODES)
        elif key == "auto_resume_mode":
            checked = v.choice(value, key_path, AUTO_RESUME_MODES)
        elif key == "max_requeue_times":
            checked = v.integer(value, key_path, minimum=0, what="a non-negative integer")
        elif key == "log_file_paths_shared_across_attempts":
            checked = v.boolean(value, key_path)
        elif key == "anomaly_detection_config":
            checked = _validate_anomaly_config(v, value, key_path)
        else:
            v.warn(key_path, unknown_key_message(key, EffectivePolicy().to_dict(), given=raw))
            policy[key] = value
            continue
        if checked is not None:
            policy[key] = checked
    if "environment" not in raw:
        v.error(
            _path(path, "environment"), "environment is required; use the exact environment name your operator gave you"
        )
    return policy


def _no_policy(reason: str) -> PolicyResult:
    return PolicyResult(status=NO_POLICY, reason=reason)


def _invalid(
    reason: str,
    *,
    wrapper: str | None = None,
    errors: list[Issue] | tuple[Issue, ...] = (),
    warnings: list[Issue] | tuple[Issue, ...] = (),
) -> PolicyResult:
    return PolicyResult(status=INVALID, reason=reason, wrapper=wrapper, errors=tuple(errors), warnings=tuple(warnings))


def _looks_like_attempt(text: str) -> bool:
    if _UPPER_MARKER.search(text):
        return True
    return bool(_ANYCASE_MARKER.search(text)) and "{" in text


def _read_object(top: dict[str, Any]) -> PolicyResult:
    present = [w for w in WRAPPERS if w in top]
    if not present:
        near = next((k for k in top if isinstance(k, str) and k.strip().upper() in WRAPPERS), None)
        if near is not None:
            wanted = near.strip().upper()
            return _invalid(
                f'The wrapper key must be exactly "{wanted}" (upper case); found {json.dumps(near)}, '
                f"so the job is not enrolled.",
                errors=[Issue(_path("$", near), f'wrapper key must be upper-case "{wanted}"')],
            )
        if POLICY_KEYS & set(top):
            return _no_policy('The comment looks like an unwrapped policy; wrap it as {"APS": {...}} to enrol the job.')
        return _no_policy("The comment is a JSON object without an APS or HEIMDALL key; the job is not enrolled.")

    v = _Validator()
    wrapper = present[0]
    if len(present) > 1:
        v.error("$", "both APS and HEIMDALL are present; use only APS")
    if wrapper in getattr(top, "duplicates", ()):
        v.error(_path("$", wrapper), "the wrapper key is given more than once; keep exactly one")
    for key in top:
        if key not in WRAPPERS:
            v.warn(_path("$", key), "top-level key outside the policy wrapper is ignored")
    policy = _validate_policy(v, top[wrapper], _path("$", wrapper))
    if v.errors:
        first = v.errors[0]
        more = f" (and {len(v.errors) - 1} more problem{'s' if len(v.errors) > 2 else ''})" if len(v.errors) > 1 else ""
        return _invalid(
            f"The {wrapper} policy is invalid, so the job is not enrolled: {first}{more}.",
            wrapper=wrapper,
            errors=v.errors,
            warnings=v.warnings,
        )
    return PolicyResult(
        status=VALID,
        reason=f"Valid policy under {wrapper}.",
        wrapper=wrapper,
        policy=EffectivePolicy.from_dict(policy),
        warnings=tuple(v.warnings),
        given=tuple(v.given),
    )


def parse_comment(comment: str | None) -> PolicyResult:
    """Read a Slurm job comment; never raises, whatever the text."""
    try:
        return _parse(comment)
    except Exception as exc:  # noqa: BLE001 - a comment must never crash a caller
        return _invalid(f"The comment could not be read ({type(exc).__name__}); the job is not enrolled.")


def _parse(comment: str | None) -> PolicyResult:
    if comment is None:
        return _no_policy("The job has no comment, so it carries no policy.")
    if not isinstance(comment, str):
        return _no_policy("The comment is not text, so it carries no policy.")
    text = comment.strip()
    if not text:
        return _no_policy("The job comment is empty, so it carries no policy.")
    if len(text) > MAX_COMMENT_CHARS:
        if _looks_like_attempt(text[:10_000]):
            return _invalid(
                f"The comment is longer than {MAX_COMMENT_CHARS} characters and is not read; the job is not enrolled."
            )
        return _no_policy("The comment is too long to be a policy.")
    attempt = _looks_like_attempt(text)
    try:
        top = _decode(text)
    except ValueError as exc:
        if attempt:
            return _invalid(
                f"The comment mentions APS/HEIMDALL but is not valid JSON ({exc}); the job is not enrolled.",
                errors=[Issue("$", f"not valid JSON: {exc}")],
            )
        return _no_policy("The comment is not JSON; ordinary comments do not enrol a job.")
    if not isinstance(top, dict):
        if attempt:
            return _invalid(
                f"The comment must be a JSON object with an APS key, but it is {_describe(top)}; the "
                f"job is not enrolled.",
                errors=[Issue("$", f"must be a JSON object, got {_describe(top)}")],
            )
        return _no_policy("The comment is JSON but not an object; it carries no policy.")
    return _read_object(top)
