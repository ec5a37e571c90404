"""`python -m bench.attack [--scenario NAME ...] [--workdir DIR]`: run the attacks, print the table,
exit 1 when any target was missed (or a scenario crashed)."""
from __future__ import annotations

import argparse
import importlib
import tempfile
import time
import traceback
from pathlib import Path

from bench.attack.table import Row, fmt_table
from testbed.cluster.apiserver import start_cluster
from testbed.cluster.crds import install_crds

SCENARIOS = ["slow", "flood", "crosssite", "squat", "events"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--scenario", action="append", choices=SCENARIOS, help="run only these (repeatable)")
    ap.add_argument("--workdir", type=Path, default=None, help="where logs go (default: a new temp dir)")
    args = ap.parse_args(argv)
    root = args.workdir or Path(tempfile.mkdtemp(prefix="kh-attack-"))
    root.mkdir(parents=True, exist_ok=True)
    names = args.scenario or SCENARIOS
    cluster = start_cluster(workdir=root / "testbed")
    install_crds(cluster)
    rows: list[Row] = []
    try:
        for name in names:
            t0 = time.monotonic()
            print(f"\n== {name} (logs under {root / name})", flush=True)
            module = importlib.import_module(f"bench.attack.{name}")
            try:
                got = module.run(cluster, root / name)
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
