"""`make faults`: the fault scenarios (an API server that restarts, freezes, lags) against the real test bed, with
the invariants of
docs/interface.md#under-faults checked from the outside. Prints one table; exits non-zero unless every
scenario passed (see Verdicts below).

Each scenario gets a fresh API server + etcd, the simulated kubelet (in this process, talking to the
API server directly), the daemon as real processes (`kuberhealthy --config`, gunicorn; one replica
with enableForceMaster, so an outage longer than the Lease's renewDeadline cannot hide a stuck watch
behind a step-down and a fresh start, unless --election), and 12 checks (kh-sim/slow, 1-2 s,
runInterval 12s, timeout 30s) in one namespace:

  api-kill      API server SIGKILLed mid-runs, started again 8 s later (same etcd, port, certs); etcd's
                revision moves on meanwhile (as other writers would make it), so every watch resumed
                afterwards from an old resourceVersion gets 410 Gone
  api-freeze    API server SIGSTOPped 25 s, then SIGCONT
  api-down      API server stopped (SIGTERM) and kept down 40 s (etcd moves on, as above)
  proxy-stall   the TCP path daemon -> API server goes silent 40 s (API server healthy); after it,
                new connections work and the old ones stay silent for good
  leader-kill   two replicas with Lease election (15s/10s/2s); the holder SIGKILLed mid-runs; reports
                go through a "Service" proxy to whichever replica is alive
  config-reload the config file rewritten twice during runs with harmless changes

Invariants: (1) no false alarm: no OK:false result written (audit log request bodies) or shown on
`/`; (2) every check records a good run after the fault ends, the last one within 60 s ("recovery
s"); (3) never two live (not Terminating, not finished) checker pods for one check (pod watch);
(4) `/` and `/healthz` answer 200 on every replica throughout (polled 2/s, 2 s client timeout; a
replica the scenario kills is polled until its death).

Verdicts: PASS; FAIL (an invariant violated: exit 1); BED (the only failures were runs the simulated
kubelet itself broke, e.g. a pod status write it lost during the outage: the invariant is unproven;
exit 3). A scenario that could not be set up: exit 2.

With --mix, half of each scenario's checks are HealthChecks (Kuberhealthy v3's kind, their result their
status; bench/faultmix.py): the same invariants hold for both kinds, and the false alarms are shown per kind.

Usage: python -m bench.faults_bench [--scenario NAME ...] [--quick] [--workdir DIR] [--election] [--mix]
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.faultmix import MixFaultBed, kind_of
from testbed.faults.faultbed import (
    BedSettings,
    FaultBed,
    fault_api_freeze,
    fault_api_kill,
    fault_api_stop,
    fault_config_reload,
    fault_leader_kill,
    fault_proxy_stall,
)
from testbed.faults.verdict import Outcome, evaluate


@dataclass(frozen=True)
class Scenario:
    name: str
    what: str  # "{s:g}" is the fault's length in seconds
    inject: Callable[[FaultBed, float], tuple[float, float]]  # (bed, seconds) -> (fault start, fault end)
    seconds: tuple[float, float] = (0.0, 0.0)  # the fault's length: full run, --quick
    settings: BedSettings = dataclasses.field(default_factory=BedSettings)


SCENARIOS = [
    Scenario("api-kill", "API server SIGKILLed mid-runs, started again {s:g} s later",
             fault_api_kill, (8.0, 8.0)),
    Scenario("api-freeze", "API server frozen (SIGSTOP) {s:g} s, then thawed",
             fault_api_freeze, (25.0, 12.0)),
    Scenario("api-down", "API server stopped (SIGTERM), down {s:g} s",
             fault_api_stop, (40.0, 20.0)),
    Scenario("proxy-stall", "TCP path daemon -> API server silent {s:g} s; old connections stay dead",
             fault_proxy_stall, (40.0, 20.0), BedSettings(api_via_proxy=True)),
    Scenario("leader-kill", "leader SIGKILLed mid-runs, the standby takes over",
             lambda bed, s: fault_leader_kill(bed), settings=BedSettings(replicas=2, reports_via_service=True)),
    Scenario("config-reload", "config file rewritten twice, {s:g} s apart, during runs",
             fault_config_reload, (8.0, 8.0)),
]
BY_NAME = {s.name: s for s in SCENARIOS}
SETTLE = 45.0  # seconds observed after the fault at least: a run caught by it fails within its 30 s timeout
QUICK_SETTLE = 35.0


def run_scenario(sc: Scenario, root: Path, quick: bool, election: bool, mix: bool = False) -> Outcome:
    settings = dataclasses.replace(sc.settings)
    if quick:
        settings = dataclasses.replace(settings, checks=6, interval="10s")
    if election:
        settings = dataclasses.replace(settings, force_master=False)
    seconds = sc.seconds[1] if quick else sc.seconds[0]
    bed = (MixFaultBed if mix else FaultBed)(root / sc.name, settings)
    print(f"\n== {sc.name}: {sc.what.format(s=seconds)}  (work dir {bed.workdir})", flush=True)
    t0 = time.monotonic()
    try:
        bed.start()
        print(f"   warm-up done in {time.monotonic() - t0:.0f}s; injecting the fault", flush=True)
        time.sleep(3.0)  # a few polls of `/` before the fault
        in_flight = bed.wait_mid_runs()
        if not in_flight:
            bed.mark("note: fewer than 2 checker pods were live when the fault started")
        start, end = sc.inject(bed, seconds)
        print(f"   fault lasted {end - start:.1f}s; observing the recovery", flush=True)
        bed.observe_recovery(end, QUICK_SETTLE if quick else SETTLE)
        outcome = evaluate(bed, sc.name, end)
        outcome.notes.append(f"fault {end - start:.1f}s; observed {time.time() - end:.0f}s after it"
                             + ("" if in_flight else "; fewer than 2 runs were in flight when it started"))
        if bed.api_proxy is not None:
            after = bed.api_proxy.accepted_since(end)
            outcome.notes.append("new API connections after the stall: "
                                 + (f"first at +{after[0] - end:.1f}s, {len(after)} in all" if after else "none"))
        return outcome
    finally:
        bed.stop()
        print(f"   done in {time.monotonic() - t0:.0f}s", flush=True)


def alarms_by_kind(o: Outcome) -> str:
    """The false alarms (and bed failures) of khchecks and of HealthChecks."""
    def count(items: list[Any], kind: str) -> int:
        return sum(1 for f, _ in items if kind_of(f.check) == kind)
    return ", ".join(f"{label} {count(o.false_alarms, kind)}"
                     + (f" (+{count(o.bed_failures, kind)} bed)" if count(o.bed_failures, kind) else "")
                     for kind, label in (("khcheck", "kh"), ("healthcheck", "hc")))


def fmt_table(rows: list[Outcome], mix: bool = False) -> str:
    head = ["scenario", "false alarms", "recovery s", "/ avail %", "/healthz avail %", "max live pods/check",
            "runs skipped", "verdict"]
    body = []
    for o in rows:
        recovery = f"{o.recovery_s:.1f}" if o.recovery_s is not None else f"never ({len(o.unrecovered)})"
        skipped = "absent" if o.skipped is None else (
            ", ".join(f"{k}={v:g}" for k, v in sorted(o.skipped.items())) or "0")
        alarms = str(len(o.false_alarms)) + (f" (+{len(o.bed_failures)} bed)" if o.bed_failures else "")
        if mix:
            alarms += f": {alarms_by_kind(o)}"
        body.append([o.name, alarms, recovery, f"{o.availability_pct(0):.1f}",
                     f"{o.availability_pct(1):.1f}", str(o.max_live), skipped,
                     o.verdict])
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(head), sep, *(line(r) for r in body)])


def details(o: Outcome) -> str:
    out = [f"-- {o.name} ({o.workdir})"]
    for n in o.notes:
        out.append(f"   note: {n}")
    for name, (root, health) in o.availability.items():
        out.append(f"   {name}: / {root.ok}/{root.total}, /healthz {health.ok}/{health.total}")
    for v in o.violations[:25]:
        out.append(f"   VIOLATION: {v}")
    if len(o.violations) > 25:
        out.append(f"   ... and {len(o.violations) - 25} more violations")
    for b in o.bed_problems[:25]:
        out.append(f"   BED: {b}")
    for p in o.testbed_problems[:10]:
        out.append(f"   test bed: {p}")
    if len(o.testbed_problems) > 10:
        out.append(f"   ... and {len(o.testbed_problems) - 10} more test-bed problems")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", action="append", choices=list(BY_NAME), help="run only this one (repeatable)")
    ap.add_argument("--quick", action="store_true", help="6 checks, shorter faults and observation")
    ap.add_argument("--workdir", type=Path, default=None, help="where logs are kept (default /tmp/kh-faults-<time>)")
    ap.add_argument("--election", action="store_true",
                    help="one-replica scenarios with Lease election instead of enableForceMaster")
    ap.add_argument("--mix", action="store_true", help="half of the checks are HealthChecks")
    args = ap.parse_args(argv)
    root = args.workdir or Path(f"/tmp/kh-faults-{time.strftime('%Y%m%d-%H%M%S')}")
    root.mkdir(parents=True, exist_ok=True)
    mixed = " (half HealthChecks)" if args.mix else ""
    print(f"fault scenarios{mixed}; logs in {root} (<scenario>/kh-*.log are the daemon logs)", flush=True)
    outcomes: list[Outcome] = []
    crashed: list[str] = []
    for sc in [BY_NAME[n] for n in args.scenario] if args.scenario else SCENARIOS:
        try:
            outcomes.append(run_scenario(sc, root, args.quick, args.election, args.mix))
        except Exception as e:  # noqa: BLE001 - one broken scenario must not hide the others' results
            crashed.append(f"{sc.name}: {type(e).__name__}: {e}")
            print(f"   SCENARIO ERROR: {type(e).__name__}: {e}", flush=True)
    report = [fmt_table(outcomes, args.mix), ""] + [details(o) for o in outcomes]
    report += [f"SCENARIO ERROR {c}" for c in crashed]
    report.append(f"\nlogs: {root}")
    text = "\n".join(report)
    (root / "summary.txt").write_text(text + "\n")
    print("\n" + text)
    if crashed:
        return 2
    verdicts = {o.verdict for o in outcomes}
    return 1 if "FAIL" in verdicts else 3 if "BED" in verdicts else 0


if __name__ == "__main__":
    sys.exit(main())
