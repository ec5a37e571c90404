"""The work one check run costs the daemon, counted over the in-memory fakes, and the budget it is held to.

Scripted runs of one check, each to completion the normal way on its own thread (as on a check worker):
claim, create the checker pod, the pod Running, the report stored, the pod Succeeded, the run recorded.
Two kinds of run, each with its own budget, so that extra work on either path is not diluted by the other:
  stored  the report is stored as the report handler stores it (testbed.fakes.report)
  posted  the checker POSTs its report to /externalCheckStatus of the daemon's Flask app (test client)
and the same two of a HealthCheck (Kuberhealthy v3's kind: its state is its status, its reports go to
/check), `hc-stored` and `hc-posted`, so that a HealthCheck run is held to its own count and can be set
beside a khcheck run's (`--kinds` prints the two side by side).
The app is built over the same caches in both, as in the daemon: its listeners see every watch event.
The test acts only while the run waits (testbed.fakes.workcount.ParkingFlag), so every run takes the same
steps, whatever the machine: the counts are exact, not sampled.

Per run, averaged over the runs: API requests by verb and resource and in all, watch events handled (the
changes the caches applied, each dispatched to the notifier and the app's listeners), and Python function
calls made for the product (every thread): the product's own and those it makes into the standard library
and third-party packages, so work moved from the product into a library still counts (not the scene's:
testbed/ and tests/, and what libraries do for it).
Not counted: set-up (the services, the app, a first run that
creates the khstate) and, between runs, the reaper's removal of the last run's pod.

The budget is work_budget.json beside this module; over_budget() holds a measurement to it (the one place
of the rule). Regenerate it from a fresh measurement with `python -m tests.unit.work_budget --write`;
without --write the measurement is compared and printed; `--write-new` adds the budgets of the kinds of run the
file lacks and leaves the others as they are. Python calls are counted for the Python that runs
the tests: a later Python that inlines comprehensions (3.12) counts fewer, which passes.
"""
from __future__ import annotations

import argparse
import json
import logging
import platform
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import kuberhealthy
import testbed
from kuberhealthy.checkclient import RUN_UUID_HEADER
from kuberhealthy.kube import HEALTHCHECKS, KHCHECKS, KHSTATES, PODS, Obj
from kuberhealthy.records import uptime
from kuberhealthy.records.checkspec import CheckSpec
from kuberhealthy.records.kinds import KIND_HEALTHCHECK
from kuberhealthy.run.runner import Outcome, Runner, RunResult
from kuberhealthy.web import create_app
from testbed.fakes import FakeServices, FakeStop, check_spec, healthcheck, khcheck, report
from testbed.fakes.workcount import CallCounter, ParkingFlag
from testbed.fakes.world import khstate_of, month_of_runs

BUDGET_FILE = Path(__file__).with_name("work_budget.json")
MARGIN = 1.10  # a count fails above its budget x MARGIN
REGENERATE = ".venv/bin/python -m tests.unit.work_budget --write"
# counted runs of each kind; "-30d": the check's state starts with 30 days of 1-minute runs in its uptime rollups
RUNS = {"stored": 20, "posted": 20, "hc-stored": 20, "hc-posted": 20, "stored-30d": 20}
HC = "hc-"  # the kinds of run of a HealthCheck: HC + how its report arrives
REPORT_PATHS = {"": "/externalCheckStatus", HC: "/check"}
CHECK = check_spec("budget", timeout="60s")
BETWEEN_RUNS = 60.0  # fake seconds from one run to the next (a run interval)
OK_REPORT = b'{"OK": true, "Errors": []}'

API_TOTAL, WATCH_EVENTS, PYTHON_CALLS = "api total", "watch events", "python calls"
PRODUCT_DIR = Path(kuberhealthy.__file__).parent
SCENE_DIRS = (Path(testbed.__file__).parent, Path(__file__).parent.parent)  # testbed/ and tests/: not counted
PerRun = dict[str, dict[str, float]]  # kind of run -> count name -> count per run
T = TypeVar("T")
Tamper = Callable[[FakeServices], None]  # changes the scene before the runs (a test adds work with it)


# --- the scripted runs --------------------------------------------------------------------------------------

class Scene:
    """The fakes, the daemon's web app over them, and the check whose runs are counted."""

    def __init__(self, kind: str, tamper: Tamper | None = None) -> None:
        self.kind = kind
        self.services = FakeServices()
        self.client = create_app(self.services, caller_wait=0.0).test_client()
        self.prefix = HC if kind.startswith(HC) else ""
        self.way, _, history = kind.removeprefix(self.prefix).partition("-")  # "stored" or "posted"
        if self.prefix:
            hc_kind = self.services.kinds.named(KIND_HEALTHCHECK)
            assert hc_kind is not None
            self.check: CheckSpec = hc_kind.parse(self.services.api.put(HEALTHCHECKS,
                                                                        healthcheck(CHECK.name, timeout="60s")))
        else:
            self.services.api.put(KHCHECKS, khcheck(CHECK.name, timeout="60s"))
            self.check = CHECK
            if history == "30d":
                self.services.api.put(KHSTATES, khstate_of(CHECK.name, CHECK.namespace, **{
                    uptime.FIELD: month_of_runs(self.services.clock.wall())}))
        if tamper is not None:
            tamper(self.services)

    def run(self) -> RunResult:
        """One run, on its own thread, to the end; the pod, the checker and the kubelet are played here."""
        services = self.services
        runner = Runner(services, self.check, FakeStop(services.clock), clock=services.clock,
                        wall=services.clock.wall)
        flag = ParkingFlag()
        if not isinstance(getattr(runner._waiter, "_flag", None), threading.Event):
            raise AssertionError("Runner._waiter._flag is gone: make Scene.run find the run's wake-up flag again")
        runner._waiter._flag = flag  # the run's one waiter: the steps below wait for it to block
        results: list[RunResult] = []

        def work() -> None:
            try:
                results.append(runner.run())
            finally:
                flag.ended()
        thread = threading.Thread(target=work, name=f"kh-work-budget-{self.kind}")
        thread.start()
        try:
            self._play(flag, runner.run_uuid)
        finally:
            if thread.is_alive() and not results:
                runner.stop.set()
                runner.wake()
            thread.join()
        if not results or results[0].outcome is not Outcome.REPORTED:
            raise AssertionError(f"a scripted run did not end reported: {results}")
        return results[0]

    def _play(self, flag: ParkingFlag, run_uuid: str) -> None:
        """The kubelet and the checker, one step at a time, each while the run waits."""
        flag.parked_after(0, "its start")
        pods = self.services.run_pods(run_uuid)
        if not pods:
            return  # the run ended before it created its pod: its result says why
        created = pods[0]
        running = _step(flag, "the pod Running", lambda: self.services.kubelet.run(created))
        _step(flag, "the report", lambda: self._report(running, run_uuid))
        _step(flag, "the pod Succeeded", lambda: self.services.kubelet.finish(running))

    def _report(self, pod: Obj, run_uuid: str) -> None:
        if self.way == "stored":
            report(self.services, pod)
            return
        answer = self.client.post(REPORT_PATHS[self.prefix], data=OK_REPORT, content_type="application/json",
                                  headers={RUN_UUID_HEADER: run_uuid},
                                  environ_base={"REMOTE_ADDR": pod["status"]["podIP"]})
        if answer.status_code != 200:
            raise AssertionError(f"the report was refused: {answer.status_code} {answer.text}")

    def events(self) -> int:
        """Changes the caches applied so far."""
        return sum(c.applied for c in self.services.reflectors)

    def between_runs(self, result: RunResult) -> None:
        """The reaper removes the finished pod; time passes to the next run."""
        self.services.api.remove(PODS, CHECK.namespace, result.pod)
        self.services.clock.advance(BETWEEN_RUNS)


def _step(flag: ParkingFlag, what: str, action: Callable[[], T]) -> T:
    """action(), then until the run has taken it in and waits again (or ended)."""
    parks = flag.parks
    value = action()
    flag.parked_after(parks, what)
    return value


@contextmanager
def _quiet() -> Iterator[None]:
    """No log record is made while counting: what a handler or filter would run is the caller's set-up."""
    before = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(before)


def measure(runs: Mapping[str, int] = RUNS, tamper: Tamper | None = None) -> PerRun:
    """Each kind's counts per run, over `runs[kind]` counted runs after one uncounted first run."""
    out: PerRun = {}
    with _quiet():
        for kind, n in runs.items():
            scene = Scene(kind, tamper)
            scene.between_runs(scene.run())  # the state created, first-time work done: not counted
            api, counter, counts = scene.services.api, CallCounter(PRODUCT_DIR, SCENE_DIRS), Counter[str]()
            for _ in range(n):
                calls, events = len(api.calls), scene.events()
                with counter.counting():
                    result = scene.run()
                counts.update(f"api {c.method} {c.plural}" for c in api.calls[calls:])
                counts[API_TOTAL] += len(api.calls) - calls
                counts[WATCH_EVENTS] += scene.events() - events
                scene.between_runs(result)  # not the run's work: the reaper's delete, the clock
            counts[PYTHON_CALLS] = counter.calls
            out[kind] = {name: round(total / n, 2) for name, total in sorted(counts.items())}
    return out


# --- the budget -----------------------------------------------------------------------------------------

def over_budget(measured: PerRun, budget: PerRun) -> list[str]:
    """One line per count above its budget x MARGIN (a count the budget lacks has a budget of 0)."""
    lines = []
    for kind, counts in sorted(measured.items()):
        for name, value in sorted(counts.items()):
            allowed = budget.get(kind, {}).get(name, 0.0)
            if value > allowed * MARGIN + 1e-9:
                lines.append(f"{kind} runs: {name} {_num(value)} per run, budget {_num(allowed)} "
                             f"(fails above {allowed * MARGIN:.2f})")
    return lines


def _num(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


def failure_message(lines: list[str]) -> str:
    return (f"more work per check run than {BUDGET_FILE.name} allows (a count fails above its budget x {MARGIN}):\n  "
            + "\n  ".join(lines)
            + f"\nIf the extra work is meant, regenerate the budget with `{REGENERATE}` (make work-budget) and "
              "commit it with the change. A change that lowers a count is welcome: regenerate to lock the gain in.")


def load_budget(path: Path = BUDGET_FILE) -> PerRun:
    per_run: PerRun = json.loads(path.read_text())["per_run"]
    return per_run


def add_new(measured: PerRun, budget: PerRun) -> PerRun:
    """The budget with the measured counts of the kinds of run it lacks added; its own kinds unchanged."""
    return {**{k: v for k, v in measured.items() if k not in budget}, **budget}


def kinds_side_by_side(measured: PerRun) -> str:
    """A khcheck run's counts beside a HealthCheck run's, for each way a report arrives."""
    rows = [f"{'count per run':32} {'khcheck':>10} {'HealthCheck':>12}  (report)"]
    for way in ("stored", "posted"):
        kh, hc = measured.get(way, {}), measured.get(HC + way, {})
        rows += [f"{name:32} {_num(kh.get(name, 0.0)):>10} {_num(hc.get(name, 0.0)):>12}  ({way})"
                 for name in sorted(set(kh) | set(hc))]
    return "\n".join(rows)


def write_budget(measured: PerRun, path: Path = BUDGET_FILE) -> None:
    body = {"rule": f"tests/unit/test_work_budget.py fails when a count per run exceeds its budget x {MARGIN}; "
                    f"regenerate with `{REGENERATE}` (make work-budget); lowering a count is welcome",
            "python": platform.python_version(), "runs": dict(RUNS), "per_run": measured}
    path.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")


def _table(measured: PerRun, budget: PerRun) -> str:
    rows = [f"{kind:9} {name:32} {_num(value):>10} {_num(budget.get(kind, {}).get(name, 0.0)):>10}"
            for kind, counts in measured.items() for name, value in counts.items()]
    return "\n".join([f"{'runs':9} {'count per run':32} {'measured':>10} {'budget':>10}", *rows])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Measure the work per check run over the fakes; compare it with "
                                             f"{BUDGET_FILE.name}, or rewrite that file (--write).")
    ap.add_argument("--write", action="store_true", help=f"rewrite {BUDGET_FILE.name} from this measurement")
    ap.add_argument("--write-new", action="store_true",
                    help=f"add to {BUDGET_FILE.name} the kinds of run it lacks; keep the others' budgets")
    ap.add_argument("--kinds", action="store_true", help="also print a khcheck run beside a HealthCheck run")
    args = ap.parse_args(argv)
    measured = measure()
    budget = load_budget() if BUDGET_FILE.exists() else {}
    print(_table(measured, budget))
    if args.kinds:
        print(kinds_side_by_side(measured))
    if args.write or args.write_new:
        write_budget(add_new(measured, budget) if args.write_new else measured)
        print(f"wrote {BUDGET_FILE}")
        return 0
    lines = over_budget(measured, budget)
    if lines:
        print(failure_message(lines))
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
