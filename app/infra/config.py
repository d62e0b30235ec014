"""One declarative settings table, read once from RECOVERY_* environment variables."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
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
    from app.domain.fleetwide.notify import TargetError, parse_targets

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


def setting(default: Any, parse: Callable[[str], Any], help: str, aliases: tuple[str, ...] = ()) -> Any:
    """One typed setting of `Settings`: its default (written here only), how its text parses, its help."""
    return field(default=default, metadata={"parse": parse, "help": help, "aliases": aliases})


@dataclass(frozen=True)
class Settings:
    """Immutable settings (each field's default is the setting's); build with Settings.from_env() or Settings.build().

    The variable of a field is RECOVERY_<FIELD>; SETTINGS (the table README shows) is generated from these fields.
    """

    data_dir: str = setting(
        "",
        _str,
        "Directory for the embedded SQLite database and local state (default: $XDG_DATA_HOME/recovery or "
        "~/.local/share/recovery).",
    )
    database_url: str = setting(
        "",
        _str,
        "SQLAlchemy async URL. Default: sqlite+aiosqlite:///<data_dir>/recovery.db. Production: "
        "postgresql+asyncpg://user@host/db.",
    )
    environment: str = setting(
        "default",
        _str,
        "This installation's environment name; a job's APS `environment` must equal it exactly (case-sensitive).",
    )
    cluster: str = setting(
        "default",
        _str,
        "Name of the Slurm cluster this worker observes and acts on; stored on every job.",
    )
    managed_partitions: tuple[str, ...] = setting(
        ("*",),
        _list,
        "Comma-separated partitions whose jobs are enrolled and may be acted on; `*` means every partition.",
    )
    site_max_requeue: int = setting(
        3,
        _int,
        "Site retry ceiling: the effective limit is min(this, the job's max_requeue_times).",
    )
    early_stop_failures: int = setting(
        3,
        _int,
        "Stop retrying after this many failures in a row with no new checkpoint since the previous attempt "
        "(0 disables).",
    )
    stop_repeated_application_failures: bool = setting(
        True,
        _bool,
        "TERMINATE instead of retrying an `application` failure (outlook of its root cause) when the "
        "previous attempt failed with the same failure fingerprint at the same iteration (give or take 5; "
        "when either iteration is unknown the fingerprint alone decides); false retries it like any other failure.",
    )
    acknowledge_scheduler_actions: bool = setting(
        False,
        _bool,
        "The operator's ceiling: without it every job's `act` resolves to observe. Also read from "
        "SLURM_ADVISOR_ACKNOWLEDGE_SCHEDULER_ACTIONS.",
        aliases=("SLURM_ADVISOR_ACKNOWLEDGE_SCHEDULER_ACTIONS",),
    )
    log_dirs: tuple[str, ...] = setting(
        (),
        _list,
        "Extra output directories the collector reads (comma- or colon-separated), besides each attempt's "
        "StdOut/StdErr.",
    )
    log_access: str = setting(
        "owner",
        _choice("owner", "readable"),
        "Which job-controlled files (StdOut/StdErr, files in the log directories, checkpoint paths from "
        "logs) Recovery reads and shows: `owner` only regular files owned by the job's uid; `readable` "
        "regular files the job's user may read by their mode bits and groups. Symlinks, FIFOs, sockets and "
        "devices are never read; what is refused is recorded as `log.refused`.",
    )
    log_access_unknown_uid: str = setting(
        "refuse",
        _choice("refuse", "world-readable"),
        "Jobs whose numeric uid is unknown (recorded before Recovery stored it): `refuse` reads none of "
        "their files; `world-readable` reads only files anyone may read.",
    )
    collector_poll_interval: float = setting(
        2.0,
        _float,
        "Seconds between polls of every tracked log file: the fallback when file-change (inotify) wake-ups "
        "do not arrive, e.g. on network filesystems.",
    )
    live_streams_per_principal: int = setting(
        4,
        _int,
        "Live event streams (dashboard pages' server-sent events) one principal may hold open at once; more "
        "are refused with 429 and the pages fall back to polling.",
    )
    collector_inotify: bool = setting(
        True,
        _bool,
        "Wake the log collector on file changes (inotify through watchfiles) instead of waiting for the next poll.",
    )
    collector_ended_grace: float = setting(
        30.0,
        _float,
        "Seconds an ended attempt's log files are still read (late writes) before the collector stops tracking them.",
    )
    log_push: bool = setting(
        False,
        _bool,
        "Accept this cluster's job logs pushed by the site's collectors (POST /loki/api/v1/push, POST /v1/logs on "
        "the API service), side by side with the file collector (which stays on).",
    )
    push_secrets_file: str = setting(
        "",
        _str,
        "File of per-collector push secrets, one `name secret` per line (# comments): a collector presents "
        "`Authorization: Bearer <secret>` (or basic auth name:secret). A bearer JWT with the `collector` role "
        "may push as well.",
    )
    push_max_body_bytes: int = setting(
        8 * 1024 * 1024,
        _int,
        "Largest push body accepted, compressed and after decompression alike (bigger: 413).",
    )
    push_queue_bytes: int = setting(
        64 * 1024 * 1024,
        _int,
        "Bytes of pushes being decoded and recorded at once per process; beyond it a push is answered 429 with "
        "Retry-After (memory stays bounded, the collector retries).",
    )
    push_label_job: tuple[str, ...] = setting(
        ("slurm_job_id", "job_id", "slurm.job.id", "jobid"),
        _list,
        "Label (Loki) or attribute (OTLP) names that carry the Slurm job id, the first present wins.",
    )
    push_label_attempt: tuple[str, ...] = setting(
        ("slurm_job_attempt", "slurm.job.attempt"),
        _list,
        "Label/attribute names that carry the attempt index (SLURM_RESTART_COUNT).",
    )
    push_label_node: tuple[str, ...] = setting(
        ("node", "host", "hostname", "host.name", "k8s.node.name"),
        _list,
        "Label/attribute names that carry the node the line was written on.",
    )
    push_label_filename: tuple[str, ...] = setting(
        ("filename", "log.file.path", "log.file.name", "path"),
        _list,
        "Label/attribute names that carry the source file (path) of the line.",
    )
    push_label_cluster: tuple[str, ...] = setting(
        ("cluster", "slurm_cluster", "slurm.cluster.name"),
        _list,
        "Label/attribute names that carry the cluster; without one, RECOVERY_CLUSTER.",
    )
    push_max_future: float = setting(
        300.0,
        _float,
        "Seconds a pushed line's timestamp may lie ahead of the service's clock (further: the push gets 400).",
    )
    push_max_age: float = setting(
        30 * 86400.0,
        _float,
        "Seconds a pushed line's timestamp may lie in the past (older: the push gets 400).",
    )
    push_rewritten_window: float = setting(
        120.0,
        _float,
        "A pushed record time within this many seconds of its arrival, on a line that says it was written earlier "
        "than that, was rewritten to ingestion time: the line's own time is used.",
    )
    push_trust_observed_time: bool = setting(
        False,
        _bool,
        "Attribute OTLP records that carry only observedTimeUnixNano by that time (off: such a line is attributed "
        "only by its attempt label or the time written in it, else it waits and is dropped as no_timestamp).",
    )
    push_retention: float = setting(
        7 * 86400.0,
        _float,
        "Seconds pushed-line identities (and the text the log view shows) are kept; a replay older than this "
        "is recorded again.",
    )
    bind: str = setting("127.0.0.1:8000", _str, "Address the HTTP service listens on (host:port).")
    url_prefix: str = setting(
        "",
        _prefix,
        "Path prefix under which every route is served (e.g. /mission-control/recovery-engine-api).",
    )
    poll_interval: float = setting(1.0, _float, "Seconds between observer ticks (one bulk `squeue --json` per tick).")
    slurm_command_timeout: float = setting(
        15.0,
        _float,
        "Seconds before a Slurm command is killed and treated as a transient failure.",
    )
    slurm_bin_dir: str = setting("", _str, "Directory holding squeue/scontrol/sacct/scancel (default: found on PATH).")
    slurm_conf: str = setting(
        "",
        _str,
        "slurm.conf the CLI adapter's commands read (sets SLURM_CONF for them; default: Slurm's own default).",
    )
    clusters_file: str = setting(
        "",
        _str,
        "TOML file of per-cluster settings ([clusters.NAME] tables) for several clusters in one installation.",
    )
    slurm_api: str = setting(
        "cli",
        _choice("cli", "rest"),
        "How the worker talks to Slurm: `cli` (squeue/scontrol/sacct) or `rest` (slurmrestd, e.g. Slinky).",
    )
    slurmrestd_url: str = setting(
        "",
        _str,
        "slurmrestd address for RECOVERY_SLURM_API=rest: `http://host:6820` or `unix:/path/slurmrestd.socket`.",
    )
    slurmrestd_token_file: str = setting(
        "",
        _str,
        "File holding a slurmrestd JWT (`SLURM_JWT=...` or the bare token); re-read when it changes or nears expiry.",
    )
    slurmrestd_jwt_key: str = setting(
        "",
        _str,
        "Slurm's jwt_key file (AuthAltParameters=jwt_key=...): Recovery then signs its own HS256 tokens.",
    )
    slurmrestd_user: str = setting(
        "",
        _str,
        "User name the slurmrestd tokens speak for (X-SLURM-USER-NAME, claim `sun`; default: the worker's user).",
    )
    slurmrestd_token_lifetime: float = setting(
        1800.0,
        _float,
        "Seconds a token signed with RECOVERY_SLURMRESTD_JWT_KEY is valid; renewed when a fifth of it is left.",
    )
    slurmrestd_api_version: str = setting(
        "",
        _str,
        "Force a slurmrestd API version such as v0.0.40 (default: the newest the server offers that Recovery reads).",
    )
    slurmrestd_cli_fallback: bool = setting(
        True,
        _bool,
        "Run scontrol for what slurmrestd has no form for (requeuehold before v0.0.45, ExcNodeList before "
        "v0.0.40, updates of one array task on v0.0.40+); false: refuse.",
    )
    unknown_grace_seconds: float = setting(
        120.0,
        _float,
        "How long a job may be missing from squeue (and accounting) before its attempt is marked UNKNOWN.",
    )
    origin_wait_seconds: float = setting(
        5.0,
        _float,
        "Seconds the advisor waits before acting when every crash line so far only reports another process's "
        "failure (a lost peer, the launcher's SIGTERM) or re-raises another's (PyTorch's 'Caught ValueError in "
        "DataLoader worker process 0'), for the line naming the process that failed first or the original exception.",
    )
    hang_query_delay: float = setting(
        60.0,
        _float,
        "Seconds the no-output detector waits after a timer expires before checking for recent output.",
    )
    straggler_enabled: bool = setting(
        False,
        _bool,
        "Operator switch for slowdown (straggler) detection and recovery; jobs must also opt in.",
    )
    straggler_drop_ratio: float = setting(
        0.7,
        _float,
        "A throughput below this fraction of the attempt's baseline counts as slow.",
    )
    straggler_duration: float = setting(300.0, _float, "Seconds a slowdown must last before it is an anomaly.")
    signatures_file: str = setting(
        "",
        _str,
        "TOML file that adds or overrides crash signatures, checkpoint and progress markers.",
    )
    advice_ttl: float = setting(
        3600.0,
        _float,
        "Seconds after which unreconciled Advice expires (ABANDONED/ADVICE_EXPIRED).",
    )
    checkpoint_check_partitions: tuple[str, ...] = setting(
        (),
        _list,
        "Partitions (comma-separated, `*` for all; empty: off) whose failed attempts get a checkpoint check "
        "before release: the newest recorded save must exist, look complete for its framework and be newer "
        "than the previous attempt's; a failed check counts as no new checkpoint for the early stop "
        "(docs/checkpoint-checks.md).",
    )
    checkpoint_check_roots: tuple[str, ...] = setting(
        (),
        _list,
        "Directories (comma- or colon-separated) the checkpoint check may look in; paths elsewhere, and "
        "symlinks leading out of them, are never followed (the check then says UNCHECKED).",
    )
    checkpoint_check_block_partitions: tuple[str, ...] = setting(
        (),
        _list,
        "Partitions (`*` for all) where a failed checkpoint check keeps the requeued job held instead of "
        "releasing it (an operator releases it); elsewhere release is never blocked.",
    )
    checkpoint_check_timeout: float = setting(
        5.0,
        _float,
        "Seconds one checkpoint check may take (read-only walk, at most 5000 entries); past it the check is UNCHECKED.",
    )
    stack_capture: bool = setting(
        True,
        _bool,
        "Capture every rank's stack (py-spy, state, nvidia-smi, NCCL flight recorder) through `srun --overlap` "
        "before ending a hung, stalled or partly failed RUNNING attempt (observe mode too); fail-open.",
    )
    stack_capture_timeout: float = setting(
        20.0,
        _float,
        "Seconds the stack capture may take in all (at most 60); past it the capture is TIMEOUT and recovery goes on.",
    )
    stack_capture_pyspy: str = setting(
        "py-spy", _str, "py-spy on the job's nodes: a path, or a name looked up on the node's PATH (empty: none)."
    )
    stack_capture_python: str = setting(
        "python3", _str, "The Python interpreter on the job's nodes that runs the stack probe (stdlib only)."
    )
    watchdog_mode: str = setting(
        "observe",
        _choice("observe", "act"),
        "The watchdog's own switch: `act` lets it release stale holds it finds.",
    )
    watchdog_hold_bound: float = setting(
        900.0,
        _float,
        "Seconds a job may stay held by our requeue before the watchdog releases it.",
    )
    watchdog_process: str = setting(
        "embedded",
        _choice("embedded", "separate"),
        "`embedded`: the worker runs the watchdog; `separate`: it does not, and `recovery watchdog` runs it "
        "under its own lease (so a dead worker still fails open).",
    )
    budget_workflow_restarts: int = setting(
        3,
        _int,
        "Recovery budget: the most automatic restarts per workflow within RECOVERY_BUDGET_WORKFLOW_WINDOW; "
        "past it, new Advice is held for an operator (BUDGET_EXCEEDED). 0: no limit.",
    )
    budget_workflow_window: float = setting(
        3600.0,
        _float,
        "Seconds of the per-workflow restart budget's sliding window.",
    )
    budget_cluster_restarts: int = setting(
        20,
        _int,
        "Recovery budget: the most automatic restarts per cluster within RECOVERY_BUDGET_CLUSTER_WINDOW. 0: no limit.",
    )
    budget_cluster_window: float = setting(600.0, _float, "Seconds of the per-cluster restart budget's sliding window.")
    storm_jobs: int = setting(
        10,
        _int,
        "Restart storm: this many distinct jobs failing on a cluster within RECOVERY_STORM_WINDOW pause "
        "automatic action cluster-wide until an operator confirms (STORM_PAUSED). 0: never.",
    )
    storm_window: float = setting(300.0, _float, "Seconds within which failing jobs count towards a restart storm.")
    node_suspect_jobs: int = setting(
        3,
        _int,
        "Node reputation: a node blamed by hardware/infrastructure evidence in this many distinct jobs "
        "within RECOVERY_NODE_SUSPECT_WINDOW becomes suspect and later Advice for any job excludes it. 0: "
        "off.",
    )
    node_suspect_window: float = setting(
        86400.0,
        _float,
        "Seconds within which blames of a node in distinct jobs count.",
    )
    node_suspect_ttl: float = setting(
        86400.0,
        _float,
        "Seconds a suspicion lasts after the node's newest blame (a new blame renews it).",
    )
    node_drain: str = setting(
        "off",
        _choice("off", "observe", "act"),
        "Drain suspect nodes: `observe` records the `scontrol update NodeName=... State=DRAIN` it would "
        "send, `act` sends and verifies it while the ceiling (RECOVERY_ACKNOWLEDGE_SCHEDULER_ACTIONS) is on.",
    )
    node_drain_max_fraction: float = setting(
        0.1,
        _float,
        "The largest fraction of a partition's nodes Recovery keeps drained at once (rounded down, never all).",
    )
    lease_seconds: float = setting(
        15.0,
        _float,
        "Length of the worker's database lease; another worker takes over after it lapses.",
    )
    fast_paths: bool = setting(
        True,
        _bool,
        "The fast paths, which give the same answers for less time (docs/fast-paths.md): the GraphQL executor's "
        "compiled completion of plain objects and the observer's batch registration of new jobs. `off` runs the "
        "normal paths (to rule them out while diagnosing).",
    )
    audit_views_enabled: bool = setting(True, _bool, "Show the Timeline and Audit Events dashboard views.")
    dev_no_auth: bool = setting(
        False,
        _bool,
        "Development only: serve without authentication. Refused unless bound to loopback; logs a warning.",
    )
    oidc_issuer: str = setting(
        "",
        _str,
        "OIDC issuer URL; its discovery document gives the JWKS used to verify bearer tokens.",
    )
    oidc_audience: str = setting("recovery", _str, "Expected `aud` of access tokens.")
    oidc_client_id: str = setting("", _str, "Client id for the dashboard's login (authorization code + PKCE).")
    oidc_client_secret: str = setting("", _str, "Client secret for the dashboard's login (empty for a public client).")
    oidc_client_secret_file: str = setting(
        "",
        _str,
        "File holding RECOVERY_OIDC_CLIENT_SECRET (recommended over the variable: the environment of a "
        "process is readable in /proc); its trailing newline is dropped. Setting both is an error.",
    )
    oidc_roles_claim: str = setting(
        "roles",
        _str,
        "Claim holding the user's roles (`viewer`, `operator`); dotted paths like realm_access.roles work.",
    )
    oidc_algorithms: tuple[str, ...] = setting(
        ("RS256", "ES256", "PS256", "EdDSA"),
        _list,
        "Signature algorithms accepted on tokens; `none` and HMAC are never accepted.",
    )
    session_secret: str = setting(
        "",
        _str,
        "Secret that signs dashboard session cookies (default: a random one per start).",
    )
    session_secret_file: str = setting(
        "",
        _str,
        "File holding RECOVERY_SESSION_SECRET (recommended over the variable: the environment of a process "
        "is readable in /proc); its trailing newline is dropped. Setting both is an error.",
    )
    metrics_bind: str = setting(
        "",
        _bind_or_off,
        "host:port of a separate, unauthenticated Prometheus `/metrics` listener in every process kind (e.g. "
        "127.0.0.1:9464); empty: off.",
    )
    log_format: str = setting(
        "text",
        _choice("text", "json"),
        "`text`: one readable line per record; `json`: one JSON object per line with component, cluster, "
        "job, attempt and Advice fields.",
    )
    notify_urls: tuple[str, ...] = setting(
        (),
        _notify_targets,
        "Whitespace-separated apprise URLs (slack://, msteams://, mailto://, json://, jsons:// ...), each "
        "optionally prefixed with the events it wants, e.g. `[terminate,abandoned]json://host/hook`; see "
        "docs/notifications.md.",
    )
    notify_max_backoff: float = setting(
        300.0,
        _float,
        "Longest wait in seconds between tries of a notification a target refused (the wait doubles from 1 "
        "s); it is retried until delivered.",
    )
    public_url: str = setting(
        "",
        _str,
        "Public base URL of the dashboard (e.g. https://recovery.example.org), for links in notifications.",
    )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Read every setting from the environment (first matching name wins), then apply overrides."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for setting in SETTINGS:
            for name in (setting.env, *setting.aliases):
                if name in env:
                    try:
                        values[setting.attr] = setting.parse(env[name])
                    except SettingsError as exc:
                        raise SettingsError(f"{setting.env}: {exc}") from None
                    break
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


def default_text(value: Any) -> str:
    """A typed default as the text its variable would hold (what the settings table shows)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


@dataclass(frozen=True)
class Setting:
    """One row of the settings table, generated from a field of `Settings`: variable, typed default, parser, help."""

    attr: str
    default: Any
    parse: Callable[[str], Any]
    help: str
    aliases: tuple[str, ...] = ()

    @property
    def env(self) -> str:
        return "RECOVERY_" + self.attr.upper()

    @property
    def default_text(self) -> str:
        return default_text(self.default)


SETTINGS: tuple[Setting, ...] = tuple(
    Setting(f.name, f.default, f.metadata["parse"], f.metadata["help"], f.metadata["aliases"]) for f in fields(Settings)
)


# RECOVERY_* variables that are not settings of the service (none is read by `recovery serve` or `recovery worker`):
# (variable, who reads it, what it means). README shows them under the settings table (`python -m app.infra.config`).
OTHER_VARIABLES: tuple[tuple[str, str, str], ...] = (
    ("RECOVERY_HTTP_URL", "client", "Base URL of a running service for `recovery status` and `check-* --server`."),
    ("RECOVERY_ACCESS_TOKEN", "client", "Bearer token those client commands send (or `--token`)."),
    ("RECOVERY_LAB_DIR", "lab", "State directory of `recovery lab` (default /tmp/recovery-lab)."),
    ("RECOVERY_LAB_SLURM", "lab", "Slurm release the lab runs: host, 22.05, 24.11 or 26.05 (or `--slurm`)."),
    ("RECOVERY_LAB_PORT_OFFSET", "lab", "Added to every lab port, to run several labs at once (or `--port-offset`)."),
    ("RECOVERY_LAB_NODES", "lab", "Emulated compute nodes of the lab (`--nodes` sets it for lab.sh)."),
    ("RECOVERY_LAB_DBD", "lab", "1: the lab also runs slurmdbd (`--dbd` sets it for lab.sh)."),
    ("RECOVERY_LAB_RESTD", "lab", "1: the lab also runs slurmrestd with JWT auth (`--restd` sets it for lab.sh)."),
    (
        "RECOVERY_LAB_TIMINGS",
        "lab",
        "fast (5 s requeue delay, schedulers every 1-2 s) or default: Slurm's own timings (or `--timings`).",
    ),
    (
        "RECOVERY_FAULT_INJECT",
        "tests",
        "`python -m tests.fault_worker` only (not part of the service): kill -9 or pause the worker at a command "
        "(tests/fault_worker.py).",
    ),
)


# (secret, the setting naming a file that holds it): the file is read once, at start.
SECRET_FILES = (("session_secret", "session_secret_file"), ("oidc_client_secret", "oidc_client_secret_file"))


def _read_secret_files(values: dict[str, Any]) -> None:
    """Fill each secret from its _FILE setting; both given is an error (which one would win is not obvious)."""
    from app.infra.secret_files import SecretFileError, read_secret_file

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
    """The settings table and the other RECOVERY_* variables, in Markdown for README (`python -m app.infra.config`)."""
    rows = ["| variable | default | meaning |", "| --- | --- | --- |"]
    for s in SETTINGS:
        name = f"`{s.env}`" + "".join(f" (or `{a}`)" for a in s.aliases)
        default = f"`{s.default_text}`" if s.default_text else "—"
        rows.append(f"| {name} | {default} | {s.help} |")
    rows += ["", "Not settings of the service (client commands, the lab, the tests):", ""]
    rows += ["| variable | read by | meaning |", "| --- | --- | --- |"]
    rows += [f"| `{name}` | {reader} | {meaning} |" for name, reader, meaning in OTHER_VARIABLES]
    return "\n".join(rows)


if __name__ == "__main__":
    print(settings_markdown())
