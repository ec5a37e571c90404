"""Command line: parse flags, load and validate config, set up logging, run the server; or, as
`kuberhealthy stop-release`, stop a release's daemons before `helm uninstall` (daemon/stoprelease.py); or, as
`kuberhealthy check-service`, the chart's `helm test` (daemon/checkservice.py); or, as `kuberhealthy migrate
to-v3|from-v3`, khcheck and khjob manifests turned into v3's HealthCheck manifests and back
(records/v3manifests.py), or with `to-v3 --in-cluster [--rollback]` a cluster's khchecks moved to
HealthChecks with their state, and back (daemon/migratelive.py).

The only module that exits the process. A bad config value or an unusable kubeconfig is one line on
stderr naming the key, and exit code 2; nothing half-starts.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from kuberhealthy import __version__
from kuberhealthy.base.config import DEFAULT_CONFIG_PATH, Config, load
from kuberhealthy.base.errors import ConfigError
from kuberhealthy.daemon import checkservice
from kuberhealthy.daemon.migratelive import LiveMigration, Unusable
from kuberhealthy.daemon.server import serve
from kuberhealthy.daemon.stoprelease import stop_release
from kuberhealthy.kube import Kube, Resources
from kuberhealthy.records import v3manifests

EXIT_CONFIG = 2
EXIT_NOTHING = 1  # migrate: the input held nothing to convert
STOP_RELEASE = "stop-release"
CHECK_SERVICE = "check-service"
MIGRATE = "migrate"
TO_V3 = "to-v3"
FROM_V3 = "from-v3"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="kuberhealthy",
        description="Run Kuberhealthy: synthetic health checks for Kubernetes. Runs khcheck resources as "
                    "checker pods on their intervals, stores results in khstates, and serves the status "
                    "page (/), Prometheus metrics (/metrics) and the check report endpoint "
                    "(/externalCheckStatus).",
        epilog="Environment: POD_NAME (this replica's identity, default hostname), POD_NAMESPACE (default "
               "kuberhealthy), KH_EXTERNAL_REPORTING_URL (overrides externalCheckReportingURL), "
               "CHECK_REAPER_RUN_INTERVAL, KUBECONFIG (when not running in a pod). "
               f"Subcommands: `kuberhealthy {STOP_RELEASE} --help`: stop a release's daemons before an "
               f"uninstall; `kuberhealthy {CHECK_SERVICE} --help`: check a release's Service answers "
               "(the chart's `helm test`); "
               f"`kuberhealthy {MIGRATE} --help`: turn khcheck and khjob manifests into v3's HealthCheck "
               "manifests and back, or move a cluster's khchecks to HealthChecks (to-v3 --in-cluster).")
    p.add_argument("-c", "--config", metavar="FILE", default=None,
                   help=f"YAML config file (default {DEFAULT_CONFIG_PATH}; a missing default file means "
                        "all defaults)")
    p.add_argument("-d", "--debug", action="store_true", help="log at debug level (overrides logLevel)")
    p.add_argument("--kubeconfig", metavar="FILE", default=None,
                   help="kubeconfig to use instead of in-cluster config / KUBECONFIG")
    p.add_argument("--version", action="version", version=f"kuberhealthy {__version__}")
    return p.parse_args(argv)


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s%(ctx)s",
        stream=sys.stderr, force=True)
    root = logging.getLogger()
    for handler in root.handlers:
        handler.addFilter(_ContextFilter())
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    logging.getLogger("kubernetes").setLevel(logging.WARNING)


class _ContextFilter(logging.Filter):
    """Appends a run's check and UUID (from LoggerAdapter extras) to the line."""

    def filter(self, record: logging.LogRecord) -> bool:
        check = getattr(record, "check", None)
        run = getattr(record, "run", None)
        record.ctx = f" [{check} run={run}]" if check else ""
        return True


def parse_stop_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog=f"kuberhealthy {STOP_RELEASE}",
        description="Scale the daemon's Deployment to 0 and wait until its pods are gone, so each daemon "
                    "removes its checker pods (in every namespace) and releases the Lease while its RBAC "
                    "still exists. The chart's pre-delete hook runs this before `helm uninstall` deletes "
                    "anything. Best effort: exits 0 whatever happened (it is logged), 2 for bad arguments "
                    "or an unusable Kubernetes configuration.")
    p.add_argument("--namespace", required=True, help="the release namespace")
    p.add_argument("--deployment", required=True, help="the daemon's Deployment")
    p.add_argument("--timeout", type=float, default=120.0, metavar="SECONDS",
                   help="how long to wait for the daemon pods to stop (default 120)")
    p.add_argument("--kubeconfig", metavar="FILE", default=None,
                   help="kubeconfig file (default: in-cluster config, else KUBECONFIG or ~/.kube/config)")
    return p.parse_args(argv)


def connect(kubeconfig: str | None, prog: str) -> Kube | None:
    """A connection per the kubeconfig (None: in-cluster, else KUBECONFIG or ~/.kube/config); None, with
    the reason on stderr, when it cannot be used."""
    try:
        return Kube.connect(kubeconfig)
    except ConfigError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return None


def stop_release_main(argv: list[str]) -> int:
    args = parse_stop_args(argv)
    setup_logging("info")
    kube = connect(args.kubeconfig, "kuberhealthy")
    if kube is None:
        return EXIT_CONFIG
    try:
        outcome = stop_release(Resources(kube), args.namespace, args.deployment, args.timeout)
    finally:
        kube.close()
    print(f"kuberhealthy {STOP_RELEASE}: {args.namespace}/{args.deployment}: {outcome}")
    return 0


def parse_check_service_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog=f"kuberhealthy {CHECK_SERVICE}",
        description="Check that a release's daemons answer through their Service: GET /readyz must answer 200 "
                    "and GET / a JSON status page with an OK key. Retries until --timeout; prints one line and "
                    "exits 0 (passed), 1 (failed) or 2 (bad arguments). The chart's `helm test` pod runs it "
                    "with the Service's environment variables, so it needs no cluster DNS.")
    p.add_argument("--url", default=None, help="the Service's base URL, e.g. http://kuberhealthy.ns.svc")
    p.add_argument("--host-env", metavar="VAR", default=None,
                   help="environment variable holding the Service's address (e.g. KUBERHEALTHY_SERVICE_HOST)")
    p.add_argument("--port-env", metavar="VAR", default=None,
                   help="environment variable holding the Service's port (e.g. KUBERHEALTHY_SERVICE_PORT)")
    p.add_argument("--timeout", type=float, default=checkservice.DEFAULT_TIMEOUT, metavar="SECONDS",
                   help=f"give up after this long (default {checkservice.DEFAULT_TIMEOUT:.0f})")
    p.add_argument("--interval", type=float, default=checkservice.RETRY_INTERVAL, metavar="SECONDS",
                   help=f"seconds between attempts (default {checkservice.RETRY_INTERVAL:.0f})")
    return p.parse_args(argv)


def check_service_main(argv: list[str]) -> int:
    args = parse_check_service_args(argv)
    try:
        base = checkservice.base_url(args.url, args.host_env, args.port_env)
    except checkservice.UsageError as e:
        print(f"kuberhealthy {CHECK_SERVICE}: error: {e}", file=sys.stderr)
        return EXIT_CONFIG
    outcome = checkservice.check_service(base, deadline=args.timeout, interval=args.interval)
    print(outcome.line, flush=True)
    return 0 if outcome.ok else 1


def parse_migrate_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog=f"kuberhealthy {MIGRATE}",
        description="Move manifests between v2's kinds (KuberhealthyCheck, KuberhealthyJob) and v3's HealthCheck, "
                    "offline: multi-document YAML in (a file, or - for stdin; a `kubectl get -o yaml` List too), "
                    "multi-document YAML out on stdout. Nothing is lost and nothing added: what the other side has "
                    "no place for is named on stderr and carried in an annotation that the way back consumes. "
                    "Objects of other kinds are left out and named on stderr. Exits 0 (converted), 1 (nothing "
                    "to convert) or 2 (bad arguments, unreadable input, invalid YAML, an object that cannot be "
                    "converted; nothing is written). `to-v3 --in-cluster` moves the khchecks of a cluster instead, "
                    "with their state (see `to-v3 --help`).")
    sub = p.add_subparsers(dest="direction", required=True, metavar="{to-v3,from-v3}")
    for name, what in ((TO_V3, "khchecks and khjobs to HealthChecks (a khjob becomes singleRunOnly: true)"),
                       (FROM_V3, "HealthChecks to khchecks, or khjobs where singleRunOnly is true")):
        s = sub.add_parser(name, help=what, description=f"Turn {what}." + (LIVE_HELP if name == TO_V3 else ""))
        s.add_argument("file", metavar="FILE", nargs="?", default=None,
                       help="the manifests to convert (default -: stdin)")
        if name == TO_V3:
            s.add_argument("--in-cluster", action="store_true",
                           help="migrate the khchecks of the cluster, with their state, instead of manifests")
            s.add_argument("--namespace", metavar="NS", default=None,
                           help="with --in-cluster: only this namespace (default: every namespace you can see)")
            s.add_argument("--dry-run", action="store_true",
                           help="with --in-cluster: write nothing, say what would be done")
            s.add_argument("--rollback", action="store_true",
                           help="with --in-cluster: undo a migration (state copied back to the khstates)")
            s.add_argument("--kubeconfig", metavar="FILE", default=None,
                           help="with --in-cluster: kubeconfig file (default: in-cluster config, else KUBECONFIG "
                                "or ~/.kube/config)")
    args = p.parse_args(argv)
    live = getattr(args, "in_cluster", False)
    if live and args.file is not None:
        p.error("--in-cluster takes no FILE")
    if not live and any(getattr(args, k, None) for k in ("namespace", "dry_run", "rollback", "kubeconfig")):
        p.error("--namespace, --dry-run, --rollback and --kubeconfig go with --in-cluster")
    if args.file is None:
        args.file = "-"
    return args


LIVE_HELP = (" With --in-cluster: for each khcheck, create the HealthCheck of the same name with the khcheck's "
             "state (khstate) in its status and mark the khcheck migrated (annotation "
             "kuberhealthy.github.io/migrated-to): from then the daemon runs the HealthCheck on the khcheck's "
             "schedule instead of the khcheck. A HealthCheck of that name that the migration did not create is "
             "left alone and named. khjobs are left alone. --rollback copies each HealthCheck's state back into "
             "its khstate, removes the mark and deletes the HealthCheck. Idempotent; a run stopped half-way is "
             "finished by the next. One line per check, then a summary; exits 0 (all done), 1 (a check refused or "
             "failed: the others were migrated) or 2 (bad arguments, no access, no HealthCheck CRD).")


def migrate_live_main(args: argparse.Namespace) -> int:
    prog = f"kuberhealthy {MIGRATE} {TO_V3}"
    kube = connect(args.kubeconfig, prog)
    if kube is None:
        return EXIT_CONFIG
    try:
        migration = LiveMigration(Resources(kube), lambda line: print(line, flush=True), dry_run=args.dry_run)
        run = migration.rollback if args.rollback else migration.to_v3
        return run(args.namespace)
    except Unusable as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return EXIT_CONFIG
    finally:
        kube.close()


def migrate_main(argv: list[str]) -> int:
    args = parse_migrate_args(argv)
    if getattr(args, "in_cluster", False):
        return migrate_live_main(args)
    prog = f"kuberhealthy {MIGRATE} {args.direction}"
    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        print(f"{prog}: error: cannot read {args.file}: {e}", file=sys.stderr)
        return EXIT_CONFIG
    convert = v3manifests.to_v3 if args.direction == TO_V3 else v3manifests.from_v3
    try:
        result = convert(text)
    except v3manifests.ManifestError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return EXIT_CONFIG
    for note in result.notes:
        print(f"{prog}: {note}", file=sys.stderr)
    if not result.objects:
        wanted = "khcheck or khjob" if args.direction == TO_V3 else "HealthCheck"
        print(f"{prog}: nothing to convert: no {wanted} in the input", file=sys.stderr)
        return EXIT_NOTHING
    sys.stdout.write(result.text())
    sys.stdout.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [STOP_RELEASE]:
        return stop_release_main(argv[1:])
    if argv[:1] == [CHECK_SERVICE]:
        return check_service_main(argv[1:])
    if argv[:1] == [MIGRATE]:
        return migrate_main(argv[1:])
    args = parse_args(argv)
    setup_logging("debug" if args.debug else "info")  # so warnings while loading the config are formatted
    try:
        config: Config = load(args.config)
    except ConfigError as e:
        print(f"kuberhealthy: error: {e}", file=sys.stderr)
        return EXIT_CONFIG
    setup_logging("debug" if args.debug else config.log_level)
    try:
        Kube.connect(args.kubeconfig).close()  # fail fast here, not in the worker after fork
    except ConfigError as e:
        print(f"kuberhealthy: error: {e}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        return serve(config, args.kubeconfig, args.config)
    except ConfigError as e:  # the TLS files, loaded before anything starts
        print(f"kuberhealthy: error: {e}", file=sys.stderr)
        return EXIT_CONFIG


if __name__ == "__main__":
    sys.exit(main())
