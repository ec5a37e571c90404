"""`python -m bench.attack [--scenario NAME ...] [--workdir DIR] [--tls] [--report-path PATH] [--kind KIND]`: run
the attacks, print the table, exit 1 when any target was missed (or a scenario crashed). `--tls` runs the
scenarios that have a TLS variant (TLS_SCENARIOS) against the daemon's HTTPS listener instead.
`--report-path /check` sends the report scenarios' reports to v3's endpoint instead of v2's.
`--kind healthcheck` makes the genuine checks HealthChecks (Kuberhealthy v3's kind) in the scenarios that
have such a variant (KIND_SCENARIOS); their reports go to `/check`, and so do the attackers' unless
`--report-path` says otherwise."""
from __future__ import annotations

import argparse
import importlib
import tempfile
import time
import traceback
from pathlib import Path

from bench.attack import target
from bench.attack.table import Row, fmt_table
from testbed.clients.rawhttp import REPORT_PATH, REPORT_PATHS
from testbed.cluster.apiserver import start_cluster
from testbed.cluster.crds import install_crds

SCENARIOS = ["slow", "flood", "crosssite", "squat", "events"]
TLS_SCENARIOS = ["slow"]  # those whose run() takes tls=True
KIND_SCENARIOS = ["slow", "flood", "crosssite"]  # those whose checks follow target.kind()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--scenario", action="append", choices=SCENARIOS, help="run only these (repeatable)")
    ap.add_argument("--workdir", type=Path, default=None, help="where logs go (default: a new temp dir)")
    ap.add_argument("--tls", action="store_true",
                    help=f"attack the daemon's HTTPS listener (scenarios: {', '.join(TLS_SCENARIOS)})")
    ap.add_argument("--report-path", choices=REPORT_PATHS, default=None,
                    help="the report endpoint the report scenarios attack (flood; slow's stalled bodies); default "
                         f"{REPORT_PATH}, or {target.V3_REPORT_PATH} with --kind {target.HEALTHCHECK}")
    ap.add_argument("--kind", choices=target.CHECK_KINDS, default=target.KHCHECK,
                    help=f"the kind of the genuine checks (scenarios: {', '.join(KIND_SCENARIOS)})")
    args = ap.parse_args(argv)
    target.choose_kind(args.kind)
    hc = args.kind == target.HEALTHCHECK
    target.choose(args.report_path or (target.V3_REPORT_PATH if hc else REPORT_PATH))
    if args.tls and set(args.scenario or []) - set(TLS_SCENARIOS):
        ap.error(f"--tls: only {', '.join(TLS_SCENARIOS)} have a TLS variant")
    if hc and set(args.scenario or []) - set(KIND_SCENARIOS):
        ap.error(f"--kind {args.kind}: only {', '.join(KIND_SCENARIOS)} have a HealthCheck variant")
    root = args.workdir or Path(tempfile.mkdtemp(prefix="kh-attack-"))
    root.mkdir(parents=True, exist_ok=True)
    names = args.scenario or (TLS_SCENARIOS if args.tls else SCENARIOS)
    if hc:
        names = [n for n in names if n in KIND_SCENARIOS]
    cluster = start_cluster(workdir=root / "testbed")
    install_crds(cluster)
    rows: list[Row] = []
    try:
        for name in names:
            t0 = time.monotonic()
            print(f"\n== {name} (logs under {root / name})", flush=True)
            module = importlib.import_module(f"bench.attack.{name}")
            try:
                got = module.run(cluster, root / name, tls=True) if args.tls else module.run(cluster, root / name)
            except Exception:  # noqa: BLE001 - a crashed scenario is a miss, and the others still run
                traceback.print_exc()
                got = [Row(name, "(scenario crashed)", "-", None, "-", "-", False)]
            rows.extend(got)
            print(f"   done in {time.monotonic() - t0:.0f}s", flush=True)
    finally:
        cluster.stop()
    print()
    print(fmt_table(rows))
    missed = [r for r in rows if not r.ok]
    print(f"\n{len(rows) - len(missed)}/{len(rows)} targets held; logs under {root}")
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
