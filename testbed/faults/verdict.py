"""The verdict of a fault scenario: the invariants the daemon promises under faults (docs/interface.md),
judged from what a FaultBed's observers saw (testbed/faults/faultbed.py, observe.py), never from the product's
own state. This module reads a FaultBed; faults.py never imports it back.

  1. no false alarm: no OK:false result written (audit log) or shown on `/` for a checker that reported
     OK; a failure the simulator itself caused is set apart (bed_failures) and makes the verdict BED
  2. every check records a good run after the fault ends; recovery = the last one's delay, <= 60 s
  3. never two live (no deletionTimestamp, Pending/Running) checker pods for one check (pod watch)
  4. `/` and `/healthz` answer 200 on every replica throughout (replicas the scenario killed: until then)

Also gathered: kuberhealthy_runs_skipped_total by reason (None when the metric is absent) and what went
wrong on the simulator's side.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

from testbed.faults.faultbed import RECOVERY_LIMIT, FaultBed
from testbed.faults.observe import Availability, Failure, scrape_skipped


@dataclass
class Outcome:
    """What one scenario measured; `violations` is empty when every invariant held."""

    name: str
    false_alarms: list[tuple[Failure, str]] = field(default_factory=list)  # (failure, what the pod did)
    # OK:false results for runs the simulator itself broke (a status write lost during the outage, a
    # report answered 5xx that a real checker would have retried): not the product's fault, but they
    # leave the invariant unproven, so they fail the verdict as "BED".
    bed_failures: list[tuple[Failure, str]] = field(default_factory=list)
    recovery_s: float | None = None  # None: some check never recorded a good run after the fault
    unrecovered: list[str] = field(default_factory=list)
    availability: dict[str, tuple[Availability, Availability]] = field(default_factory=dict)  # replica: (/, /healthz)
    max_live: int = 0
    overlaps: list[str] = field(default_factory=list)
    skipped: dict[str, float] | None = None  # kuberhealthy_runs_skipped_total by reason; None: metric absent
    testbed_problems: list[str] = field(default_factory=list)  # simulator errors, pods it never drove
    bed_problems: list[str] = field(default_factory=list)  # the bed_failures, described
    notes: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    workdir: Path | None = None

    @property
    def verdict(self) -> str:
        """PASS; FAIL (an invariant violated); BED (only failures the simulator caused: unproven)."""
        if self.violations:
            return "FAIL"
        return "BED" if self.bed_failures else "PASS"

    def availability_pct(self, which: int) -> float:
        values = [pair[which] for pair in self.availability.values() if pair[which].total]
        return min((a.percent for a in values), default=0.0)


def evaluate(bed: FaultBed, name: str, fault_end: float, until: float | None = None) -> Outcome:
    """Every invariant, from the observers' evidence between start() and `until` (default: now)."""
    assert bed.audit is not None and bed.pods is not None and bed.sim is not None
    until = until or time.time()
    out = Outcome(name, workdir=bed.workdir)
    bed.audit.poll()
    failures = {(f.check, f.last_run, f.errors): f for f in bed.audit.failures(bed.t_start, until)}
    for key, f in bed.status_failures.found.items():
        failures.setdefault(key, f)
    for f in sorted(failures.values(), key=lambda f: f.first_seen):
        pod, bed_caused = _what_the_pod_did(bed, f.uuid)
        (out.bed_failures if bed_caused else out.false_alarms).append((f, pod))
    for f, pod in out.false_alarms:
        out.violations.append(f"false alarm at {f.first_seen - fault_end:+.1f}s (from the fault end) "
                              f"on {f.check} [{f.source}]: {'; '.join(f.errors)} -- {pod}")
    for f, pod in out.bed_failures:
        out.bed_problems.append(f"failure at {f.first_seen - fault_end:+.1f}s on {f.check} [{f.source}] caused "
                                f"by the simulator: {'; '.join(f.errors)} -- {pod}")
    good = bed.first_good_after(fault_end)
    out.unrecovered = [c for c in bed.checks if c not in good]
    if not out.unrecovered:
        out.recovery_s = max(good.values()) - fault_end
        if out.recovery_s > RECOVERY_LIMIT:
            out.violations.append(f"recovery took {out.recovery_s:.1f}s (> {RECOVERY_LIMIT:.0f}s)")
    else:
        out.violations.append(f"no good run after the fault (until +{until - fault_end:.0f}s) for "
                              f"{len(out.unrecovered)} checks: {', '.join(out.unrecovered)}")
    out.max_live = max(bed.pods.max_live.values(), default=0)
    if bed.pods.relists == 0 or not bed.pods.created:
        out.violations.append("instrument failure: the pod observer never saw a checker pod")
    for o in bed.pods.overlaps:
        out.overlaps.append(f"{o.check} at +{o.at - fault_end:.1f}s: {', '.join(o.pods)}")
        out.violations.append(f"two live checker pods for {o.check} at +{o.at - fault_end:.1f}s: "
                              f"{', '.join(o.pods)}")
    for dname, (root, health) in bed.pollers.items():
        out.availability[dname] = (root.result, health.result)
        for a in (root.result, health.result):
            if a.total and a.ok < a.total:
                first = ", ".join(f"+{t - fault_end:.1f}s {w}" for t, w in a.failures[:5])
                out.violations.append(f"{dname} {a.url.rsplit(':', 1)[1]} answered {a.ok}/{a.total} "
                                      f"({a.percent:.1f}%); first misses: {first}")
    for dname, d in bed.daemons.items():
        if dname not in bed.killed and d.proc is not None and d.proc.poll() is not None:
            out.violations.append(f"{dname} exited on its own with code {d.proc.returncode}")
    out.skipped = _scrape_skipped(bed)
    out.testbed_problems = _testbed_problems(bed, fault_end)
    return out


def _what_the_pod_did(bed: FaultBed, run_uuid: str) -> tuple[str, bool]:
    """What the run's checker pod did, and whether the simulator (not the product) broke the run.

    Always the simulator's fault: a final API failure in its records (a write it gave up on; a
    real kubelet retries until it gets through). With a simulator whose reports do not retry 5xx
    answers until the run's deadline (its ReportResult has no `outcome`), also a report answered
    5xx or not at all: kuberhealthy/checkclient.py would have retried it. A simulator that retries
    like the checkclient makes those the product's."""
    assert bed.pods is not None and bed.sim is not None
    pod = bed.pods.pod_of_run.get(run_uuid)
    if not pod:
        return "no checker pod was seen for this run", False
    rec = bed.sim.record(bed.ns, pod)
    if rec is None:
        return f"pod {pod} was never driven by the simulated kubelet", True
    parts = [f"pod {pod}: phase {rec.phase}"]
    caused = bool(rec.errors)
    report = rec.report
    retries_like_checkclient = report is not None and hasattr(report, "outcome")
    if report is None:
        parts.append("did not report (yet)")
    elif report.status is not None:
        statuses = getattr(report, "statuses", None)
        seen = f" (answers {statuses})" if statuses and len(statuses) > 1 else ""
        parts.append(f"reported OK, answered HTTP {report.status} {report.response_body.strip()[:120]!r}{seen}")
        caused = caused or (report.status >= 500 and not retries_like_checkclient)
    else:
        parts.append(f"reported OK, no answer after {report.attempts} attempts ({report.error})")
        caused = caused or not retries_like_checkclient
    retried = getattr(rec, "api_retries", 0)
    if retried:
        parts.append(f"the simulator retried {retried} API calls")
    if rec.errors:
        parts.append(f"simulator errors: {'; '.join(rec.errors)[:200]}")
    return ", ".join(parts), caused


def _scrape_skipped(bed: FaultBed) -> dict[str, float] | None:
    total: dict[str, float] = {}
    present = False
    for dname, d in bed.daemons.items():
        if dname in bed.killed:
            continue
        try:
            text = requests.get(d.url + "/metrics", timeout=5).text
        except requests.RequestException:
            continue
        if "kuberhealthy_runs_skipped_total" in text:
            present = True
        for reason, v in scrape_skipped(text).items():
            total[reason] = total.get(reason, 0.0) + v
    return total if present else None


def _testbed_problems(bed: FaultBed, fault_end: float) -> list[str]:
    """What went wrong on the simulator's side: failed API writes (a real kubelet would retry them)
    and checker pods created after the fault that the simulated kubelet never picked up."""
    assert bed.sim is not None and bed.pods is not None
    problems: list[str] = []
    records = bed.sim.records
    for key, rec in sorted(records.items()):
        if rec.errors:
            problems.append(f"{key}: {'; '.join(rec.errors)[:300]}")
    settle_by = time.time() - 10  # pods younger than this may simply not be adopted yet
    for pod, seen in sorted(bed.pods.created.items()):
        if fault_end <= seen <= settle_by and f"{bed.ns}/{pod}" not in records:
            problems.append(f"{bed.ns}/{pod} (created +{seen - fault_end:.1f}s after the fault) was never "
                            "driven by the simulated kubelet")
    return problems
