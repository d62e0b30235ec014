"""One declarative settings table, read once from RECOVERY_* environment variables."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any


class SettingsError(ValueError):
    """A setting has a value that cannot be used."""


def _bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off", ""}:
        return False
    raise SettingsError(f"expected true/false, got {raw!r}")


def _int(raw: str) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        raise SettingsError(f"expected an integer, got {raw!r}") from None


def _float(raw: str) -> float:
    try:
        return float(raw.strip())
    except ValueError:
        raise SettingsError(f"expected a number, got {raw!r}") from None


def _list(raw: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in raw.replace(":", ",").split(",") if part.strip())


def _str(raw: str) -> str:
    return raw.strip()


def _prefix(raw: str) -> str:
    value = raw.strip().rstrip("/")
    if value and not value.startswith("/"):
        value = "/" + value
    return value


def _choice(*options: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip().lower()
        if value not in options:
            raise SettingsError(f"expected one of {', '.join(options)}, got {raw!r}")
        return value

    return parse


def _bind_or_off(raw: str) -> str:
    value = raw.strip()
    if not value:
        return ""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise SettingsError(f"expected host:port (or empty for off), got {raw!r}")
    return f"{host or '127.0.0.1'}:{int(port)}"


def _notify_targets(raw: str) -> tuple[str, ...]:
    from app.domain.notify import TargetError, parse_targets

    entries = tuple(raw.split())
    try:
        parse_targets(entries)
    except TargetError as exc:
        raise SettingsError(str(exc)) from None
    return entries


def default_data_dir() -> str:
    """Where the embedded database and state live unless RECOVERY_DATA_DIR says otherwise."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return str(Path(base) / "recovery")


@dataclass(frozen=True)
class Setting:
    """One row of the settings table: env name, default (as text), parser, help."""

    attr: str
    default: str
    parse: Callable[[str], Any]
    help: str
    aliases: tuple[str, ...] = ()

    @property
    def env(self) -> str:
        return "RECOVERY_" + self.attr.upper()


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "data_dir",
        "",
        _str,
        "Directory for the embedded SQLite database and local state (default: "
        "$XDG_DATA_HOME/recovery or ~/.local/share/recovery).",
    ),
    Setting(
        "database_url",
        "",
        _str,
        "SQLAlchemy async URL. Default: sqlite+aiosqlite:///<data_dir>/recovery.db. Production: "
        "postgresql+asyncpg://user@host/db.",
    ),
    Setting(
        "environment",
        "default",
        _str,
        "This installation's environment name; a job's APS `environment` must equal it exactly (case-sensitive).",
    ),
    Setting(
        "cluster", "default", _str, "Name of the Slurm cluster this worker observes and acts on; stored on every job."
    ),
    Setting(
        "managed_partitions",
        "*",
        _list,
        "Comma-separated partitions whose jobs are enrolled and may be acted on; `*` means every partition.",
    ),
    Setting(
        "site_max_requeue",
        "3",
        _int,
        "Site retry ceiling: the effective limit is min(this, the job's max_requeue_times).",
    ),
    Setting(
        "early_stop_failures",
        "3",
        _int,
        "Stop retrying after this many failures in a row with no new checkpoint since the previous "
        "attempt (0 disables).",
    ),
    Setting(
        "stop_repeated_application_failures",
        "true",
        _bool,
        "TERMINATE instead of retrying an `application` failure (outlook of its root cause) when the "
        "previous attempt failed with the same failure fingerprint at the same iteration (give or take 5; "
        "when either iteration is unknown the fingerprint alone decides); false retries it like any other failure.",
    ),
    Setting(
        "acknowledge_scheduler_actions",
        "false",
        _bool,
        "The operator's ceiling: without it every job's `act` resolves to observe. Also read from "
        "SLURM_ADVISOR_ACKNOWLEDGE_SCHEDULER_ACTIONS.",
        ("SLURM_ADVISOR_ACKNOWLEDGE_SCHEDULER_ACTIONS",),
    ),
    Setting(
        "log_dirs",
        "",
        _list,
        "Extra output directories the collector reads (comma- or colon-separated), besides each "
        "attempt's StdOut/StdErr.",
    ),
    Setting(
        "log_access",
        "owner",
        _choice("owner", "readable"),
        "Which job-controlled files (StdOut/StdErr, files in the log directories, checkpoint paths from logs) "
        "Recovery reads and shows: `owner` only regular files owned by the job's uid; `readable` regular files "
        "the job's user may read by their mode bits and groups. Symlinks, FIFOs, sockets and devices are never "
        "read; what is refused is recorded as `log.refused`.",
    ),
    Setting(
        "log_access_unknown_uid",
        "refuse",
        _choice("refuse", "world-readable"),
        "Jobs whose numeric uid is unknown (recorded before Recovery stored it): `refuse` reads none of their "
        "files; `world-readable` reads only files anyone may read.",
    ),
    Setting(
        "collector_poll_interval",
        "2.0",
        _float,
        "Seconds between polls of every tracked log file: the fallback when file-change (inotify) "
        "wake-ups do not arrive, e.g. on network filesystems.",
    ),
    Setting(
        "collector_inotify",
        "true",
        _bool,
        "Wake the log collector on file changes (inotify through watchfiles) instead of waiting for the next poll.",
    ),
    Setting(
        "collector_ended_grace",
        "30",
        _float,
        "Seconds an ended attempt's log files are still read (late writes) before the collector stops tracking them.",
    ),
    Setting("bind", "127.0.0.1:8000", _str, "Address the HTTP service listens on (host:port)."),
    Setting(
        "url_prefix",
        "",
        _prefix,
        "Path prefix under which every route is served (e.g. /mission-control/recovery-engine-api).",
    ),
    Setting("poll_interval", "1.0", _float, "Seconds between observer ticks (one bulk `squeue --json` per tick)."),
    Setting(
        "slurm_command_timeout",
        "15",
        _float,
        "Seconds before a Slurm command is killed and treated as a transient failure.",
    ),
    Setting("slurm_bin_dir", "", _str, "Directory holding squeue/scontrol/sacct/scancel (default: found on PATH)."),
    Setting(
        "slurm_conf",
        "",
        _str,
        "slurm.conf the CLI adapter's commands read (sets SLURM_CONF for them; default: Slurm's own default).",
    ),
    Setting(
        "clusters_file",
        "",
        _str,
        "TOML file of per-cluster settings ([clusters.NAME] tables) for several clusters in one installation.",
    ),
    Setting(
        "slurm_api",
        "cli",
        _choice("cli", "rest"),
        "How the worker talks to Slurm: `cli` (squeue/scontrol/sacct) or `rest` (slurmrestd, e.g. Slinky).",
    ),
    Setting(
        "slurmrestd_url",
        "",
        _str,
        "slurmrestd address for RECOVERY_SLURM_API=rest: `http://host:6820` or `unix:/path/slurmrestd.socket`.",
    ),
    Setting(
        "slurmrestd_token_file",
        "",
        _str,
        "File holding a slurmrestd JWT (`SLURM_JWT=...` or the bare token); re-read when it changes or nears expiry.",
    ),
    Setting(
        "slurmrestd_jwt_key",
        "",
        _str,
        "Slurm's jwt_key file (AuthAltParameters=jwt_key=...): Recovery then signs its own HS256 tokens.",
    ),
    Setting(
        "slurmrestd_user",
        "",
        _str,
        "User name the slurmrestd tokens speak for (X-SLURM-USER-NAME, claim `sun`; default: the worker's user).",
    ),
    Setting(
        "slurmrestd_token_lifetime",
        "1800",
        _float,
        "Seconds a token signed with RECOVERY_SLURMRESTD_JWT_KEY is valid; renewed when a fifth of it is left.",
    ),
    Setting(
        "slurmrestd_api_version",
        "",
        _str,
        "Force a slurmrestd API version such as v0.0.40 (default: the newest the server offers that Recovery reads).",
    ),
    Setting(
        "slurmrestd_cli_fallback",
        "true",
        _bool,
        "Run scontrol for what slurmrestd has no form for (requeuehold before v0.0.45, ExcNodeList before v0.0.40, "
        "updates of one array task on v0.0.40+); false: refuse.",
    ),
    Setting(
        "unknown_grace_seconds",
        "120",
        _float,
        "How long a job may be missing from squeue (and accounting) before its attempt is marked UNKNOWN.",
    ),
    Setting(
        "hang_query_delay",
        "60",
        _float,
        "Seconds the no-output detector waits after a timer expires before checking for recent output.",
    ),
    Setting(
        "straggler_enabled",
        "false",
        _bool,
        "Operator switch for slowdown (straggler) detection and recovery; jobs must also opt in.",
    ),
    Setting(
        "straggler_drop_ratio",
        "0.7",
        _float,
        "A throughput below this fraction of the attempt's baseline counts as slow.",
    ),
    Setting("straggler_duration", "300", _float, "Seconds a slowdown must last before it is an anomaly."),
    Setting(
        "signatures_file",
        "",
        _str,
        "TOML file that adds or overrides crash signatures, checkpoint and progress markers.",
    ),
    Setting(
        "advice_ttl", "3600", _float, "Seconds after which unreconciled Advice expires (ABANDONED/ADVICE_EXPIRED)."
    ),
    Setting(
        "checkpoint_check_partitions",
        "",
        _list,
        "Partitions (comma-separated, `*` for all; empty: off) whose failed attempts get a checkpoint check before "
        "release: the newest recorded save must exist, look complete for its framework and be newer than the "
        "previous attempt's; a failed check counts as no new checkpoint for the early stop "
        "(docs/checkpoint-checks.md).",
    ),
    Setting(
        "checkpoint_check_roots",
        "",
        _list,
        "Directories (comma- or colon-separated) the checkpoint check may look in; paths elsewhere, and symlinks "
        "leading out of them, are never followed (the check then says UNCHECKED).",
    ),
    Setting(
        "checkpoint_check_block_partitions",
        "",
        _list,
        "Partitions (`*` for all) where a failed checkpoint check keeps the requeued job held instead of releasing "
        "it (an operator releases it); elsewhere release is never blocked.",
    ),
    Setting(
        "checkpoint_check_timeout",
        "5",
        _float,
        "Seconds one checkpoint check may take (read-only walk, at most 5000 entries); past it the check is UNCHECKED.",
    ),
    Setting(
        "watchdog_mode",
        "observe",
        _choice("observe", "act"),
        "The watchdog's own switch: `act` lets it release stale holds it finds.",
    ),
    Setting(
        "watchdog_hold_bound",
        "900",
        _float,
        "Seconds a job may stay held by our requeue before the watchdog releases it.",
    ),
    Setting(
        "watchdog_process",
        "embedded",
        _choice("embedded", "separate"),
        "`embedded`: the worker runs the watchdog; `separate`: it does not, and `recovery watchdog` "
        "runs it under its own lease (so a dead worker still fails open).",
    ),
    Setting(
        "budget_workflow_restarts",
        "3",
        _int,
        "Recovery budget: the most automatic restarts per workflow within RECOVERY_BUDGET_WORKFLOW_WINDOW; "
        "past it, new Advice is held for an operator (BUDGET_EXCEEDED). 0: no limit.",
    ),
    Setting("budget_workflow_window", "3600", _float, "Seconds of the per-workflow restart budget's sliding window."),
    Setting(
        "budget_cluster_restarts",
        "20",
        _int,
        "Recovery budget: the most automatic restarts per cluster within RECOVERY_BUDGET_CLUSTER_WINDOW. 0: no limit.",
    ),
    Setting("budget_cluster_window", "600", _float, "Seconds of the per-cluster restart budget's sliding window."),
    Setting(
        "storm_jobs",
        "10",
        _int,
        "Restart storm: this many distinct jobs failing on a cluster within RECOVERY_STORM_WINDOW pause automatic "
        "action cluster-wide until an operator confirms (STORM_PAUSED). 0: never.",
    ),
    Setting("storm_window", "300", _float, "Seconds within which failing jobs count towards a restart storm."),
    Setting(
        "node_suspect_jobs",
        "3",
        _int,
        "Node reputation: a node blamed by hardware/infrastructure evidence in this many distinct jobs within "
        "RECOVERY_NODE_SUSPECT_WINDOW becomes suspect and later Advice for any job excludes it. 0: off.",
    ),
    Setting("node_suspect_window", "86400", _float, "Seconds within which blames of a node in distinct jobs count."),
    Setting(
        "node_suspect_ttl",
        "86400",
        _float,
        "Seconds a suspicion lasts after the node's newest blame (a new blame renews it).",
    ),
    Setting(
        "node_drain",
        "off",
        _choice("off", "observe", "act"),
        "Drain suspect nodes: `observe` records the `scontrol update NodeName=... State=DRAIN` it would send, "
        "`act` sends and verifies it while the ceiling (RECOVERY_ACKNOWLEDGE_SCHEDULER_ACTIONS) is on.",
    ),
    Setting(
        "node_drain_max_fraction",
        "0.1",
        _float,
        "The largest fraction of a partition's nodes Recovery keeps drained at once (rounded down, never all).",
    ),
    Setting(
        "lease_seconds",
        "15",
        _float,
        "Length of the worker's database lease; another worker takes over after it lapses.",
    ),
    Setting("audit_views_enabled", "true", _bool, "Show the Timeline and Audit Events dashboard views."),
    Setting(
        "dev_no_auth",
        "false",
        _bool,
        "Development only: serve without authentication. Refused unless bound to loopback; logs a warning.",
    ),
    Setting(
        "oidc_issuer", "", _str, "OIDC issuer URL; its discovery document gives the JWKS used to verify bearer tokens."
    ),
    Setting("oidc_audience", "recovery", _str, "Expected `aud` of access tokens."),
    Setting("oidc_client_id", "", _str, "Client id for the dashboard's login (authorization code + PKCE)."),
    Setting("oidc_client_secret", "", _str, "Client secret for the dashboard's login (empty for a public client)."),
    Setting(
        "oidc_client_secret_file",
        "",
        _str,
        "File holding RECOVERY_OIDC_CLIENT_SECRET (recommended over the variable: the environment of a process is "
        "readable in /proc); its trailing newline is dropped. Setting both is an error.",
    ),
    Setting(
        "oidc_roles_claim",
        "roles",
        _str,
        "Claim holding the user's roles (`viewer`, `operator`); dotted paths like realm_access.roles work.",
    ),
    Setting(
        "oidc_algorithms",
        "RS256,ES256,PS256,EdDSA",
        _list,
        "Signature algorithms accepted on tokens; `none` and HMAC are never accepted.",
    ),
    Setting(
        "session_secret", "", _str, "Secret that signs dashboard session cookies (default: a random one per start)."
    ),
    Setting(
        "session_secret_file",
        "",
        _str,
        "File holding RECOVERY_SESSION_SECRET (recommended over the variable: the environment of a process is "
        "readable in /proc); its trailing newline is dropped. Setting both is an error.",
    ),
    Setting(
        "metrics_bind",
        "",
        _bind_or_off,
        "host:port of a separate, unauthenticated Prometheus `/metrics` listener in every process kind "
        "(e.g. 127.0.0.1:9464); empty: off.",
    ),
    Setting(
        "log_format",
        "text",
        _choice("text", "json"),
        "`text`: one readable line per record; `json`: one JSON object per line with component, cluster, job, "
        "attempt and Advice fields.",
    ),
    Setting(
        "notify_urls",
        "",
        _notify_targets,
        "Whitespace-separated apprise URLs (slack://, msteams://, mailto://, json://, jsons:// ...), each optionally "
        "prefixed with the events it wants, e.g. `[terminate,abandoned]json://host/hook`; see docs/notifications.md.",
    ),
    Setting(
        "notify_max_backoff",
        "300",
        _float,
        "Longest wait in seconds between tries of a notification a target refused (the wait doubles from 1 s); "
        "it is retried until delivered.",
    ),
    Setting(
        "public_url",
        "",
        _str,
        "Public base URL of the dashboard (e.g. https://recovery.example.org), for links in notifications.",
    ),
)


@dataclass(frozen=True)
class Settings:
    """Immutable settings; build with Settings.from_env() or Settings.build(**overrides)."""

    data_dir: str = ""
    database_url: str = ""
    environment: str = "default"
    cluster: str = "default"
    managed_partitions: tuple[str, ...] = ("*",)
    site_max_requeue: int = 3
    early_stop_failures: int = 3
    stop_repeated_application_failures: bool = True
    acknowledge_scheduler_actions: bool = False
    log_dirs: tuple[str, ...] = ()
    log_access: str = "owner"
    log_access_unknown_uid: str = "refuse"
    collector_poll_interval: float = 2.0
    collector_inotify: bool = True
    collector_ended_grace: float = 30.0
    bind: str = "127.0.0.1:8000"
    url_prefix: str = ""
    poll_interval: float = 1.0
    slurm_command_timeout: float = 15.0
    slurm_bin_dir: str = ""
    slurm_conf: str = ""
    clusters_file: str = ""
    slurm_api: str = "cli"
    slurmrestd_url: str = ""
    slurmrestd_token_file: str = ""
    slurmrestd_jwt_key: str = ""
    slurmrestd_user: str = ""
    slurmrestd_token_lifetime: float = 1800.0
    slurmrestd_api_version: str = ""
    slurmrestd_cli_fallback: bool = True
    unknown_grace_seconds: float = 120.0
    hang_query_delay: float = 60.0
    straggler_enabled: bool = False
    straggler_drop_ratio: float = 0.7
    straggler_duration: float = 300.0
    signatures_file: str = ""
    advice_ttl: float = 3600.0
    checkpoint_check_partitions: tuple[str, ...] = ()
    checkpoint_check_roots: tuple[str, ...] = ()
    checkpoint_check_block_partitions: tuple[str, ...] = ()
    checkpoint_check_timeout: float = 5.0
    watchdog_mode: str = "observe"
    watchdog_hold_bound: float = 900.0
    watchdog_process: str = "embedded"
    budget_workflow_restarts: int = 3
    budget_workflow_window: float = 3600.0
    budget_cluster_restarts: int = 20
    budget_cluster_window: float = 600.0
    storm_jobs: int = 10
    storm_window: float = 300.0
    node_suspect_jobs: int = 3
    node_suspect_window: float = 86400.0
    node_suspect_ttl: float = 86400.0
    node_drain: str = "off"
    node_drain_max_fraction: float = 0.1
    lease_seconds: float = 15.0
    audit_views_enabled: bool = True
    dev_no_auth: bool = False
    oidc_issuer: str = ""
    oidc_audience: str = "recovery"
    oidc_client_id: str = ""
    oidc_client_secret: str = ""
    oidc_client_secret_file: str = ""
    oidc_roles_claim: str = "roles"
    oidc_algorithms: tuple[str, ...] = ("RS256", "ES256", "PS256", "EdDSA")
    session_secret: str = ""
    session_secret_file: str = ""
    metrics_bind: str = ""
    log_format: str = "text"
    notify_urls: tuple[str, ...] = ()
    notify_max_backoff: float = 300.0
    public_url: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Read every setting from the environment (first matching name wins), then apply overrides."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for setting in SETTINGS:
            raw = setting.default
            for name in (setting.env, *setting.aliases):
                if name in env:
                    raw = env[name]
                    break
            try:
                values[setting.attr] = setting.parse(raw)
            except SettingsError as exc:
                raise SettingsError(f"{setting.env}: {exc}") from None
        values.update(overrides)
        return cls.build(**values)

    @classmethod
    def build(cls, **values: Any) -> Settings:
        """Fill in derived defaults (data dir, database URL) and return frozen settings."""
        data_dir = values.get("data_dir") or default_data_dir()
        values["data_dir"] = data_dir
        if not values.get("database_url"):
            values["database_url"] = f"sqlite+aiosqlite:///{Path(data_dir) / 'recovery.db'}"
        known = {f.name for f in fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise SettingsError(f"unknown settings: {', '.join(sorted(unknown))}")
        _read_secret_files(values)
        return cls(**values)

    @property
    def bind_host(self) -> str:
        return self.bind.rsplit(":", 1)[0] or "127.0.0.1"

    @property
    def bind_port(self) -> int:
        return int(self.bind.rsplit(":", 1)[1]) if ":" in self.bind else 8000

    def partition_managed(self, partition: str | None) -> bool:
        """True when the partition is in the managed allowlist (`*` matches all)."""
        if "*" in self.managed_partitions:
            return True
        return bool(partition) and any(p in self.managed_partitions for p in (partition or "").split(","))


# (secret, the setting naming a file that holds it): the file is read once, at start.
SECRET_FILES = (("session_secret", "session_secret_file"), ("oidc_client_secret", "oidc_client_secret_file"))


def _read_secret_files(values: dict[str, Any]) -> None:
    """Fill each secret from its _FILE setting; both given is an error (which one would win is not obvious)."""
    from app.secret_files import SecretFileError, read_secret_file

    for secret, file_attr in SECRET_FILES:
        path = values.get(file_attr)
        if not path:
            continue
        env, file_env = "RECOVERY_" + secret.upper(), "RECOVERY_" + file_attr.upper()
        if values.get(secret):
            raise SettingsError(f"{env} and {file_env} are both set: give the secret one way (the file is safer)")
        try:
            values[secret] = read_secret_file(str(path), file_env)
        except SecretFileError as exc:
            raise SettingsError(str(exc)) from None


def settings_markdown() -> str:
    """The settings table as Markdown, for README (`python -m app.config`)."""
    rows = ["| variable | default | meaning |", "| --- | --- | --- |"]
    for s in SETTINGS:
        name = f"`{s.env}`" + "".join(f" (or `{a}`)" for a in s.aliases)
        default = f"`{s.default}`" if s.default else "—"
        rows.append(f"| {name} | {default} | {s.help} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(settings_markdown())
