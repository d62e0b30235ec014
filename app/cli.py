"""The `recovery` command: run the service, migrate, run a Slurm lab, lint jobs and logs."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from app.auth import check_auth_configuration
from app.infra.config import Settings, SettingsError
from app.infra.log_masking import install_access_log_filter, mask_url

log = logging.getLogger("recovery")


def _configure_logging(verbose: bool, settings: Settings | None = None) -> None:
    from app.infra.log_format import configure

    configure(
        fmt=settings.log_format if settings else "text",
        verbose=verbose,
        cluster=settings.cluster if settings else None,
    )


def start_metrics(settings: Settings) -> None:
    """Start the /metrics listener when RECOVERY_METRICS_BIND is set (a bad address is a settings error)."""
    from app.infra.metrics import start_listener

    try:
        start_listener(settings.metrics_bind)
    except OSError as exc:
        raise SettingsError(f"RECOVERY_METRICS_BIND={settings.metrics_bind}: cannot listen: {exc}") from None


async def _upgrade(settings: Settings) -> str | None:
    from app.infra.context import AppContext
    from app.infra.migrate import current_revision, upgrade

    ctx = AppContext.open(settings)
    try:
        await upgrade(ctx.engine)
        return await current_revision(ctx.engine)
    finally:
        await ctx.close()


async def _require_head(settings: Settings) -> None:
    from app.infra.context import AppContext
    from app.infra.migrate import current_revision, head_revision

    ctx = AppContext.open(settings)
    try:
        revision = await current_revision(ctx.engine)
    finally:
        await ctx.close()
    if revision != head_revision():
        raise SettingsError(
            f"database is at revision {revision}, this code needs {head_revision()}: run `recovery db upgrade`"
        )


async def _run_alone(settings: Settings, role: str, clusters: Sequence[Settings] | None = None) -> None:
    """Run worker services without HTTP, under each cluster's lease for `role`, until SIGINT/SIGTERM."""
    from app.infra.context import AppContext
    from worker.registry import cluster_runners

    start_metrics(settings)
    ctx = AppContext.open(settings)
    runners = cluster_runners(ctx, clusters or [settings], role=role)
    loop = asyncio.get_running_loop()

    def stop_all() -> None:
        for runner in runners:
            runner.stop()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop_all)
    for runner in runners:
        log.info(
            "%s for cluster %r running (holder %s, lease %s)",
            role,
            runner.ctx.settings.cluster,
            runner.holder,
            runner.lease,
        )
    try:
        await asyncio.gather(*(runner.run() for runner in runners))
    finally:
        await ctx.close()


async def _serve(settings: Settings, *, with_worker: bool) -> None:
    import uvicorn

    from app.infra.clusters import every_cluster
    from app.infra.context import AppContext
    from app.main import create_app
    from worker.registry import cluster_runners

    start_metrics(settings)
    ctx = AppContext.open(settings)
    # with RECOVERY_CLUSTERS_FILE: one worker per cluster in this process (each under its own lease)
    runners = cluster_runners(ctx, every_cluster(settings)) if with_worker else []

    async def background() -> None:
        await asyncio.gather(*(runner.run() for runner in runners))

    app = create_app(settings, ctx=ctx, background=background if runners else None)
    # log_config=None: uvicorn's loggers go through the one handler app.infra.log_format installs (text or json).
    config = uvicorn.Config(
        app, host=settings.bind_host, port=settings.bind_port, log_level="info", lifespan="on", log_config=None
    )
    server = uvicorn.Server(config)
    install_access_log_filter()  # after uvicorn.Config, which (re)configures its loggers
    # Everything imported and built so far lives as long as the process: keep it out of the cyclic collector's
    # generations, so a collection during a request walks only what requests allocate.
    gc.collect()
    gc.freeze()
    log.info(
        "serving on http://%s%s/ (dashboard: %s/dashboard/workflow)",
        settings.bind,
        settings.url_prefix,
        settings.url_prefix,
    )
    await server.serve()


def _cmd_up(args: argparse.Namespace, settings: Settings) -> int:
    check_auth_configuration(settings)

    async def main() -> None:
        revision = await _upgrade(settings)
        log.info("database %s at revision %s", mask_url(settings.database_url), revision)
        await _serve(settings, with_worker=True)

    asyncio.run(main())
    return 0


def _cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    check_auth_configuration(settings)

    async def main() -> None:
        await _require_head(settings)
        await _serve(settings, with_worker=False)

    asyncio.run(main())
    return 0


def _selected_clusters(args: argparse.Namespace, settings: Settings) -> list[Settings]:
    """--cluster NAME (its table of RECOVERY_CLUSTERS_FILE), --all-clusters, or RECOVERY_CLUSTER alone."""
    from app.infra.clusters import cluster_settings, every_cluster

    if getattr(args, "all_clusters", False):
        if not settings.clusters_file:
            raise SettingsError("--all-clusters needs RECOVERY_CLUSTERS_FILE")
        return every_cluster(settings)
    if getattr(args, "cluster", None):
        return [cluster_settings(settings, args.cluster)]
    return [settings]


def _cmd_alone(role: str, args: argparse.Namespace, settings: Settings) -> int:
    """`recovery worker` and `recovery watchdog`: the role's services alone, once the database is at head."""
    clusters = _selected_clusters(args, settings)

    async def main() -> None:
        await _require_head(settings)
        await _run_alone(settings, role, clusters)

    asyncio.run(main())
    return 0


def _cmd_db(args: argparse.Namespace, settings: Settings) -> int:
    from app.infra.context import AppContext
    from app.infra.migrate import current_revision, head_revision

    if args.db_action == "upgrade":
        revision = asyncio.run(_upgrade(settings))
        print(f"database at revision {revision} (head {head_revision()})")
        return 0

    async def show() -> str | None:
        ctx = AppContext.open(settings)
        try:
            return await current_revision(ctx.engine)
        finally:
            await ctx.close()

    revision = asyncio.run(show())
    print(f"database at revision {revision} (head {head_revision()})")
    return 0 if revision == head_revision() else 1


def _cmd_lab(args: argparse.Namespace, settings: Settings) -> int:
    from app.lab.cli import run_args

    return run_args(args.lab_action, args)


def _target(args: argparse.Namespace, settings: Settings) -> Callable[[str | None], Any]:
    """The installation check-policy/check-script judge against (flags, --server, RECOVERY_ENVIRONMENT or none)."""
    from app.authoring.target import resolve

    def judge(comment: str | None) -> Any:
        return resolve(
            settings,
            environment=args.environment,
            partitions=args.partitions,
            server=args.server,
            token=args.token,
            comment=comment,
        )

    return judge


def _cmd_check_policy(args: argparse.Namespace, settings: Settings) -> int:
    from app.authoring.policy_check import run

    return run(args.policy, as_json=args.json, settings=settings, target=_target(args, settings))


def _cmd_check_script(args: argparse.Namespace, settings: Settings) -> int:
    from app.authoring.script_check import run

    return run(args.script, as_json=args.json, settings=settings, target=_target(args, settings))


def _cmd_check_log(args: argparse.Namespace, settings: Settings) -> int:
    from app.authoring.log_check import run

    return run(
        args.file,
        as_json=args.json,
        settings=settings,
        policy=args.policy,
        script=args.script,
        nodes=args.nodes,
        tasks_per_node=args.tasks_per_node,
    )


def _cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    from app.client import status

    return status(settings, args.job, server=args.server, token=args.token, as_json=args.json, timeout=args.timeout)


def _cmd_watch(args: argparse.Namespace, settings: Settings) -> int:
    from app.client import watch

    return watch(settings, args.job, server=args.server, token=args.token, follow=args.follow, timeout=args.timeout)


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError("expected seconds between 0 and 3600")
    return value


def _cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from app.demo import run_demo

    return asyncio.run(run_demo(settings, timeout=args.timeout, keep_serving=not args.exit, keep_db=args.keep_db))


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs)."""
    parser = argparse.ArgumentParser(prog="recovery", description="Keeps GPU training runs on Slurm alive.")
    from app import __version__

    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging (libraries' INFO lines too)")
    parser.add_argument("--version", action="version", version=f"recovery {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(
        name: str, handler: Callable[[argparse.Namespace, Settings], int], help: str
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.set_defaults(handler=handler)
        return p

    command("up", _cmd_up, "run the API, dashboard and worker in one process (migrates the database first)")
    command("serve", _cmd_serve, "run only the API and dashboard (stateless; any number of replicas)")
    worker = command(
        "worker", partial(_cmd_alone, "worker"), "run only the worker (one active per cluster, by database lease)"
    )
    watchdog = command(
        "watchdog",
        partial(_cmd_alone, "watchdog"),
        "run only the watchdog, under its own lease (with RECOVERY_WATCHDOG_PROCESS=separate)",
    )
    for p in (worker, watchdog):
        p.add_argument("--cluster", help="only this cluster (its table of RECOVERY_CLUSTERS_FILE, or just its name)")
        p.add_argument("--all-clusters", action="store_true", help="one per cluster of RECOVERY_CLUSTERS_FILE")
    db = command("db", _cmd_db, "database migrations")
    db.add_argument("db_action", choices=["upgrade", "current"], help="upgrade to head, or show the revision")
    lab = command("lab", _cmd_lab, "a real single-machine Slurm for development, demos and tests")
    lab.add_argument("lab_action", choices=["up", "down", "status", "build"])
    from app.lab.cli import add_arguments as add_lab_arguments

    add_lab_arguments(lab)
    cp = command("check-policy", _cmd_check_policy, "validate an APS policy JSON (as given in --comment)")
    cp.add_argument("policy", help="the comment text, e.g. '{\"APS\":{...}}'")
    cp.add_argument("--json", action="store_true", help="machine-readable output")
    cs = command("check-script", _cmd_check_script, "will this batch script's job be enrolled? what would go wrong?")
    cs.add_argument("script", help="path to the sbatch script")
    cs.add_argument("--json", action="store_true", help="machine-readable output")
    for p in (cp, cs):
        p.add_argument("--environment", help="the installation's RECOVERY_ENVIRONMENT to judge against")
        p.add_argument("--partitions", help="its managed partitions, comma-separated (`*`: all)")
        p.add_argument(
            "--server",
            metavar="URL",
            help="ask a running service for its environment and partitions (RECOVERY_HTTP_URL)",
        )
        p.add_argument("--token", help="bearer token for --server (default: RECOVERY_ACCESS_TOKEN)")
    cl = command("check-log", _cmd_check_log, "which lines would the detectors see in this log file?")
    cl.add_argument("file", help="path to a training log")
    cl.add_argument("--json", action="store_true", help="machine-readable output")
    job = cl.add_mutually_exclusive_group()
    job.add_argument("--policy", metavar="JSON", help="the job's policy (its --comment JSON): use its hang thresholds")
    job.add_argument("--script", metavar="FILE", help="the job's sbatch script: use the hang thresholds of its policy")
    cl.add_argument(
        "--nodes",
        help="the attempt's nodes as a Slurm hostlist, e.g. node[1-4] (lines naming one become node candidates; "
        "maps ranks to nodes; blames a single node)",
    )
    cl.add_argument("--tasks-per-node", help="SLURM_TASKS_PER_NODE of the attempt, e.g. 4(x2), to map ranks to nodes")
    st = command("status", _cmd_status, "the story of a job (or JOB/ATTEMPT) from a running service")
    st.add_argument("job", help="a Slurm job id (12345), an array task (12345_7), or JOB/ATTEMPT (12345/1)")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    wt = command("watch", _cmd_watch, "follow a job live (GraphQL subscription), one line per new story")
    wt.add_argument("job", help="a Slurm job id")
    wt.add_argument(
        "--follow",
        action="store_true",
        help="keep watching after the job has ended (default: exit after its last sentence)",
    )
    for p in (st, wt):
        p.add_argument("--server", metavar="URL", help="the service (default RECOVERY_HTTP_URL, else RECOVERY_BIND)")
        p.add_argument("--token", help="bearer token (default RECOVERY_ACCESS_TOKEN; none against a dev-mode service)")
        p.add_argument(
            "--timeout",
            type=_positive_seconds,
            default=15.0,
            metavar="SECONDS",
            help="give up on a request that has not been answered in full after this long (default 15)",
        )
    demo = command("demo", _cmd_demo, "local Slurm lab + service + example jobs that crash and hang and are recovered")
    demo.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for both recoveries (default 300)")
    demo.add_argument("--exit", action="store_true", help="stop once the examples are done instead of serving")
    demo.add_argument(
        "--keep-db",
        action="store_true",
        help="keep the previous demo's database (default: a fresh one, so no run inherits another's history)",
    )
    demo.formatter_class = argparse.RawDescriptionHelpFormatter
    demo.epilog = (
        "environment:\n"
        "  RECOVERY_BIND=0.0.0.0:8080      serve somewhere other than 127.0.0.1:8000\n"
        "  RECOVERY_LAB_DIR=/tmp/my-lab    a private Slurm lab (state, logs, job ids), not /tmp/recovery-lab\n"
        "  RECOVERY_LAB_PORT_OFFSET=100    shift the lab's Slurm ports, to run beside another lab\n"
        "The lab keeps running after the demo: stop it with `recovery lab down` (same environment)."
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `recovery` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    _configure_logging(args.verbose)
    try:
        settings = Settings.from_env()
        _configure_logging(args.verbose, settings)
        handler: Any = args.handler
        return int(handler(args, settings) or 0)
    except SettingsError as exc:
        print(f"recovery: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
