"""Every Prometheus metric the service exports, and the /metrics listener (RECOVERY_METRICS_BIND).

All definitions live here so that the Grafana dashboard (docs/grafana-dashboard.json) and the
tests can check names against one list. Labels are bounded sets (command, class, disposition,
reason, route family, ...): never a job id, path or user. The listener is prometheus-client's own
HTTP server on a separate address, so scrapers need no OIDC; it is off unless the setting is given.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.infra.asgi import HttpMiddleware

log = logging.getLogger("recovery.metrics")

LATENCY = (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 900)
FAST = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

DETECTION_LATENCY = Histogram(
    "recovery_detection_latency_seconds",
    "Source time of the evidence line (as the log says) to the anomaly being recorded.",
    ["kind", "detector"],
    buckets=LATENCY,
)
DECISION_LATENCY = Histogram(
    "recovery_decision_latency_seconds",
    "Signal (anomaly recorded, or the attempt's end) to the Advice recorded or changed.",
    ["operation"],
    buckets=LATENCY,
)
SCHEDULER_COMMAND_SECONDS = Histogram(
    "recovery_scheduler_command_seconds",
    "Duration of one Slurm command (squeue, scontrol, sacct, scancel ...).",
    ["command"],
    buckets=FAST,
)
SCHEDULER_COMMAND_FAILURES = Counter(
    "recovery_scheduler_command_failures_total",
    "Slurm commands that failed, by command and error class.",
    ["command", "error_class"],
)
RECONCILIATIONS = Counter(
    "recovery_reconciliation_outcomes_total",
    "Advice that ended reconciliation, by disposition (CONVERGED, ABANDONED) and reason.",
    ["disposition", "reason"],
)
ACTIVE_ADVICE = Gauge(
    "recovery_active_advice", "Advice still to be reconciled, by operation.", ["cluster", "operation"]
)
OBSERVER_TICK_SECONDS = Histogram(
    "recovery_observer_tick_seconds", "Duration of one observer tick (squeue and applying it).", buckets=FAST
)
OBSERVER_JOBS_SEEN = Gauge("recovery_observer_jobs_seen", "Jobs in the observer's last squeue snapshot.")
COLLECTOR_BYTES_READ = Counter("recovery_collector_bytes_read_total", "Bytes of job log files read by the collector.")
COLLECTOR_FILES_TRACKED = Gauge("recovery_collector_files_tracked", "Log files the collector is tracking.")
COLLECTOR_READ_LAG = Histogram(
    "recovery_collector_read_lag_seconds",
    "Last modification of a log file to the collector reading it.",
    buckets=FAST,
)
PUSH_REQUESTS = Counter(
    "recovery_push_requests_total",
    "Log pushes answered, by protocol (loki, otlp) and HTTP status.",
    ["protocol", "status"],
)
PUSH_LINES = Counter(
    "recovery_push_lines_total",
    "Pushed log lines by outcome: recorded, replayed (pushed again), dropped:<reason>.",
    ["outcome"],
)
PUSH_BACKPRESSURE = Counter("recovery_push_backpressure_total", "Pushes answered 429 because the push budget was full.")
PUSH_SECONDS = Histogram(
    "recovery_push_seconds", "Time from a push's arrival to its acknowledgment.", ["protocol"], buckets=FAST
)
FEED_LAG = Gauge("recovery_feed_lag_seconds", "Age of the newest change-feed entry when a reader took it.", ["reader"])
LEASE_HELD = Gauge("recovery_lease_held", "1 while this process holds the lease.", ["lease", "holder"])
LEASE_EPOCH = Gauge("recovery_lease_epoch", "Epoch of the lease as this process last saw it.", ["lease"])
API_REQUEST_SECONDS = Histogram(
    "recovery_api_request_seconds",
    "HTTP request latency by route family.",
    ["family", "method", "status"],
    buckets=FAST,
)
WATCHDOG_RELEASES = Counter("recovery_watchdog_releases_total", "Holds the watchdog released, by result.", ["result"])
NOTIFICATIONS = Counter(
    "recovery_notifications_total", "Notification deliveries, by event and result.", ["event", "result"]
)
NOTIFICATION_BACKLOG = Gauge("recovery_notification_backlog", "Notifications written but not yet delivered.")
GOODPUT_SECONDS = Gauge(
    "recovery_goodput_seconds",
    "Wall time of the enrolled runs seen in the last 24 h, by goodput bucket (docs/goodput.md); refreshed each minute.",
    ["cluster", "bucket"],
)
EFFECTIVE_TRAINING = Gauge(
    "recovery_effective_training_ratio",
    "Productive share (0..1) of the wall time of the enrolled runs seen in the last 24 h (docs/goodput.md).",
    ["cluster"],
)
SERVICE_TICK_FAILURES = Counter(
    "recovery_service_tick_failures_total", "Background service ticks that raised.", ["service"]
)

EXPORTED = tuple(
    metric._name  # noqa: SLF001 - prometheus-client keeps the base name here
    for metric in (
        DETECTION_LATENCY,
        DECISION_LATENCY,
        SCHEDULER_COMMAND_SECONDS,
        SCHEDULER_COMMAND_FAILURES,
        RECONCILIATIONS,
        ACTIVE_ADVICE,
        OBSERVER_TICK_SECONDS,
        OBSERVER_JOBS_SEEN,
        COLLECTOR_BYTES_READ,
        COLLECTOR_FILES_TRACKED,
        COLLECTOR_READ_LAG,
        FEED_LAG,
        LEASE_HELD,
        LEASE_EPOCH,
        API_REQUEST_SECONDS,
        WATCHDOG_RELEASES,
        NOTIFICATIONS,
        NOTIFICATION_BACKLOG,
        GOODPUT_SECONDS,
        EFFECTIVE_TRAINING,
        SERVICE_TICK_FAILURES,
    )
)


def exported_series() -> set[str]:
    """Every series name a scrape can show (histogram _bucket/_sum/_count, counter _total/_created)."""
    names: set[str] = set()
    for metric in REGISTRY.collect():
        names.add(metric.name)
        names.update(sample.name for sample in metric.samples)
    for name in EXPORTED:
        base = name.removesuffix("_total")
        names.update({name, base, f"{base}_total", f"{base}_bucket", f"{base}_sum", f"{base}_count"})
    return names


def seconds_since(when: dt.datetime | None, now: dt.datetime) -> float | None:
    """Non-negative seconds from `when` to `now` (None when unknown); clocks that disagree give 0."""
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return max(0.0, (now - when).total_seconds())


@contextmanager
def scheduler_command(command: str) -> Iterator[None]:
    """Time one Slurm command; a raised error counts as a failure of its class."""
    started = time.monotonic()
    try:
        yield
    except Exception as exc:
        SCHEDULER_COMMAND_FAILURES.labels(command, type(exc).__name__).inc()
        raise
    finally:
        SCHEDULER_COMMAND_SECONDS.labels(command).observe(time.monotonic() - started)


def set_lease(lease: str, holder: str, *, held: bool, epoch: int | None) -> None:
    """Record this process's view of a lease."""
    LEASE_HELD.labels(lease, holder).set(1 if held else 0)
    if epoch is not None:
        LEASE_EPOCH.labels(lease).set(epoch)


def route_family(path: str, prefix: str = "") -> str:
    """A bounded label for a request path: graphql, rest, dashboard, static, health or other."""
    if prefix and path.startswith(prefix):
        path = path[len(prefix) :]
    first = path.strip("/").split("/", 1)[0]
    if first in {"graphql", "dashboard", "static"}:
        return first
    if first == "v1":
        return "rest"
    if first in {"healthz", "readyz"}:
        return "health"
    return "other"


class RequestMetrics(HttpMiddleware):
    """ASGI middleware: request latency by route family, method and status class."""

    def __init__(self, app: ASGIApp, prefix: str = "") -> None:
        super().__init__(app)
        self.prefix = prefix

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.monotonic()
        status = {"code": 500}

        async def capture(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, capture)
        finally:
            family = route_family(scope.get("path", ""), self.prefix)
            method = scope.get("method", "GET") if scope.get("method") in {"GET", "POST", "HEAD"} else "other"
            API_REQUEST_SECONDS.labels(family, method, f"{status['code'] // 100}xx").observe(time.monotonic() - started)


_started: dict[str, Any] = {}


def start_listener(bind: str) -> tuple[str, int] | None:
    """Serve /metrics on `bind` (host:port) in a thread, once per process; '' keeps it off."""
    if not bind:
        return None
    if bind in _started:
        return _started[bind]
    host, _, port = bind.rpartition(":")
    server, _thread = start_http_server(int(port), addr=host or "127.0.0.1")
    address = server.server_address[:2]
    _started[bind] = (str(address[0]), int(address[1]))
    log.info("metrics on http://%s:%s/metrics", *_started[bind])
    return _started[bind]
