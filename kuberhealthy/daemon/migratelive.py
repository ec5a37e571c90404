"""`kuberhealthy migrate to-v3 --in-cluster [--rollback]`: the live migration carried out against the API
server, one khcheck at a time, as records/migrateplan.py plans it.

Each step looks at what is there before it writes, so a second run changes nothing (and says so) and a
run killed half-way is finished by the next one. The switch (the khcheck's state carried into the
HealthCheck's status, then the khcheck marked) is made between two runs: while a run of the khcheck is
in flight (its khstate claimed, not finished) it waits for that run's end, at most the check's timeout
and a margin; if the khstate changed while its state was being carried, it is carried again before the
mark. A rollback switches back the same way, between two runs of the HealthCheck. khjobs are left alone
(each line says so): a khjob runs once, and one that has run would run again as a new HealthCheck.

Every request has a timeout; a check whose step fails is named with the error and the others go on.
Not here: deciding what to do (migrateplan.py), the arguments and the exit (cli.py).
"""
from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kuberhealthy.base.config import Config
from kuberhealthy.base.errors import ApiError, Conflict, NotFound
from kuberhealthy.kube import HEALTHCHECKS, KHCHECKS, KHJOBS, KHSTATES, Bounds, Obj, Resources
from kuberhealthy.records import hcstate, migrateplan, v3manifests
from kuberhealthy.records.checkspec import CheckSpec, SpecProblem
from kuberhealthy.records.migrateplan import Outcome, Plan, Step

logger = logging.getLogger(__name__)

REQUEST_TIMEOUT = 10.0  # seconds for one API request
WRITE_BUDGET = 30.0  # seconds one read-modify-write may take, conflicts included
POLL = 0.5  # seconds between looks at a run in flight
RUN_MARGIN = 15.0  # seconds beyond a check's timeout that its run in flight is waited for
CARRY_ATTEMPTS = 3  # times the state is carried again when it changed while being carried

EXIT_OK, EXIT_PARTIAL, EXIT_UNUSABLE = 0, 1, 2


class Unusable(Exception):
    """The migration cannot start: the khchecks or HealthChecks cannot be listed (no CRD, no access)."""


@dataclass
class Tally:
    """What happened, for the summary line and the exit code."""

    counts: dict[str, int] = field(default_factory=dict)
    jobs: int = 0
    failed: bool = False

    def add(self, word: str, failed: bool = False) -> None:
        self.counts[word] = self.counts.get(word, 0) + 1
        self.failed = self.failed or failed

    def summary(self, checks: int) -> str:
        parts = ", ".join(f"{n} {word}" for word, n in self.counts.items()) or "nothing to do"
        jobs = f"; {self.jobs} khjob{'s' if self.jobs != 1 else ''} left alone" if self.jobs else ""
        return f"{checks} khcheck{'s' if checks != 1 else ''}: {parts}{jobs}"


class LiveMigration:
    """One invocation: to_v3() or rollback() over a namespace (None: every namespace the credentials see)."""

    def __init__(self, resources: Resources, out: Callable[[str], None], *, dry_run: bool = False,
                 stop: threading.Event | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.res = resources
        self.out = out
        self.dry_run = dry_run
        self._stop = stop or threading.Event()
        self._clock = clock

    # --- the two directions ------------------------------------------------------------------------------

    def to_v3(self, namespace: str | None) -> int:
        return self._each(namespace, migrateplan.plan_to_v3, self._migrate)

    def rollback(self, namespace: str | None) -> int:
        return self._each(namespace, migrateplan.plan_rollback, self._roll_back)

    def _each(self, namespace: str | None, plan_of: Callable[[Obj, Obj | None], Plan],
              act: Callable[[Plan, Obj, Obj | None], tuple[str, list[str]]]) -> int:
        khchecks, healthchecks, jobs = self._listed(namespace)
        tally = Tally(jobs=len(jobs))
        for job in jobs:
            meta = job.get("metadata") or {}
            self.out(f"khjob {meta.get('namespace')}/{meta.get('name')}: left alone (a khjob runs once)")
        for khcheck in khchecks:
            meta = khcheck.get("metadata") or {}
            key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
            plan = plan_of(khcheck, healthchecks.get(key))
            try:
                word, details = act(plan, khcheck, healthchecks.get(key))
            except (ApiError, v3manifests.ManifestError, _Changed) as e:
                logger.debug("khcheck %s: step failed", plan.key, exc_info=True)
                word, details = "failed", [str(e)]
            failed = word in ("failed", "refused")
            tally.add(word, failed)
            shown = f": {'; '.join(details)}" if word in ("refused", "failed") else \
                f" ({'; '.join(details)})" if details else ""
            self.out(f"khcheck {plan.key}: {word}{shown}")
        self.out(("dry run, nothing written: " if self.dry_run else "") + tally.summary(len(khchecks)))
        return EXIT_PARTIAL if tally.failed else EXIT_OK

    def _listed(self, namespace: str | None) -> tuple[list[Obj], dict[tuple[str, str], Obj], list[Obj]]:
        try:
            khchecks, _ = self.res.list(KHCHECKS, namespace, timeout=REQUEST_TIMEOUT)
        except ApiError as e:
            raise Unusable(f"cannot list khchecks: {e}") from e
        try:
            hcs, _ = self.res.list(HEALTHCHECKS, namespace, timeout=REQUEST_TIMEOUT)
        except NotFound as e:
            raise Unusable("the HealthCheck CRD is not installed (helm/kuberhealthy/crds/): nothing can be "
                           "migrated") from e
        except ApiError as e:
            raise Unusable(f"cannot list HealthChecks: {e}") from e
        try:
            jobs, _ = self.res.list(KHJOBS, namespace, timeout=REQUEST_TIMEOUT)
        except ApiError:
            jobs = []
        by_key = {(str(h["metadata"].get("namespace")), str(h["metadata"].get("name"))): h for h in hcs}
        return sorted(khchecks, key=_key), by_key, sorted(jobs, key=_key)

    # --- to v3 -------------------------------------------------------------------------------------------

    def _migrate(self, plan: Plan, khcheck: Obj, hc: Obj | None) -> tuple[str, list[str]]:
        if plan.outcome is Outcome.REFUSE:
            return "refused", [plan.reason]
        if plan.outcome is not Outcome.MIGRATE:
            return plan.outcome.value, [plan.reason] if plan.reason else []
        details = [plan.reason] if plan.reason else []
        body, notes = migrateplan.healthcheck_for(khcheck)
        details.extend(notes)
        if self.dry_run:
            if Step.CREATE in plan.steps:  # the API server validates it against the CRD, stores nothing
                self.res.create(HEALTHCHECKS, plan.namespace, body, timeout=REQUEST_TIMEOUT, dry_run=True)
            return "would migrate", [*details, ", then ".join(s.value for s in plan.steps)]
        if Step.UNMARK_STALE in plan.steps:
            khcheck = self.res.merge_patch(KHCHECKS, plan.namespace, plan.name, migrateplan.mark_patch(khcheck, None),
                                           timeout=REQUEST_TIMEOUT)
        if Step.CREATE in plan.steps:
            try:
                hc = self.res.create(HEALTHCHECKS, plan.namespace, body, timeout=REQUEST_TIMEOUT)
            except Conflict as e:
                if not e.already_exists:
                    raise
                hc = self.res.get(HEALTHCHECKS, plan.namespace, plan.name, timeout=REQUEST_TIMEOUT)
                if not migrateplan.ours(khcheck, hc):
                    return "refused", [migrateplan.refusal(khcheck, hc)]
        assert hc is not None
        details.extend(self._switch_to_v3(plan, khcheck, hc))
        return "migrated", details

    def _switch_to_v3(self, plan: Plan, khcheck: Obj, hc: Obj) -> list[str]:
        """Carry the khstate into the HealthCheck's status between two runs of the khcheck, then mark it."""
        notes: list[str] = []
        ns, name = plan.namespace, plan.name
        state = self._between_runs(lambda: self._khstate(ns, name), _timeout(khcheck, CheckSpec.of), notes)
        for _ in range(CARRY_ATTEMPTS):
            if state is not None:
                self._write_status(ns, name, state, khcheck, notes)
            again = self._khstate(ns, name)
            if _version(again) == _version(state):
                break
            state = self._between_runs(lambda: self._khstate(ns, name), _timeout(khcheck, CheckSpec.of), notes)
        else:
            raise _Changed(f"its khstate kept changing while being carried ({CARRY_ATTEMPTS} times); run again")
        self.res.merge_patch(KHCHECKS, ns, name, migrateplan.mark_patch(khcheck, name), timeout=REQUEST_TIMEOUT)
        after = self._khstate(ns, name)
        if _version(after) != _version(state):
            notes.append("its khstate changed while the khcheck was being marked: a run of the khcheck may have "
                         "started at the switch")
        runs = sum(int(((state or {}).get("spec") or {}).get(k) or 0) for k in ("successCount", "failureCount"))
        last = ((state or {}).get("spec") or {}).get("LastRun")
        notes.insert(0, f"state carried: {runs} runs, last run {last}" if state is not None and last else
                     "no state to carry: it has not run yet")
        return notes

    def _write_status(self, ns: str, name: str, state: Obj, khcheck: Obj, notes: list[str]) -> None:
        def mutate(current: Obj | None) -> Obj | None:
            if current is None:
                raise NotFound(f"HealthCheck {ns}/{name} is gone")
            if not migrateplan.ours(khcheck, current):
                raise _Changed(migrateplan.refusal(khcheck, current))
            status = migrateplan.status_for(state, khcheck, current)
            current["status"] = status
            return current
        written = self.res.update_with_retry(HEALTHCHECKS.status(), ns, name, mutate, bounds=self._bounds())
        assert written is not None
        sent = migrateplan.status_for(state, khcheck, written) or {}
        kept = written.get("status") or {}
        if "history" in sent and "history" not in kept and not any("drops" in n for n in notes):
            notes.append("the installed HealthCheck CRD (Kuberhealthy v3's own) drops our status fields: "
                         "result and counters carried, history not")

    # --- rollback ----------------------------------------------------------------------------------------

    def _roll_back(self, plan: Plan, khcheck: Obj, hc: Obj | None) -> tuple[str, list[str]]:
        if plan.outcome is not Outcome.ROLL_BACK:
            return plan.outcome.value, [plan.reason] if plan.reason else []
        details = [plan.reason] if plan.reason else []
        if self.dry_run:
            return "would roll back", [*details, ", then ".join(s.value for s in plan.steps) or "nothing left"]
        ns, name = plan.namespace, plan.name
        if Step.COPY_BACK in plan.steps:
            assert hc is not None
            details.extend(self._copy_back(ns, name, khcheck, _timeout(hc, _hc_spec)))
        if Step.UNMARK in plan.steps:
            self.res.merge_patch(KHCHECKS, ns, name, migrateplan.mark_patch(khcheck, None), timeout=REQUEST_TIMEOUT)
        if Step.DELETE in plan.steps:
            assert hc is not None
            self.res.delete(HEALTHCHECKS, ns, name, uid=migrateplan.uid(hc), timeout=REQUEST_TIMEOUT)
            details.append(f"HealthCheck {ns}/{name} deleted")
        return "rolled back", details

    def _copy_back(self, ns: str, name: str, khcheck: Obj, timeout: float) -> list[str]:
        notes: list[str] = []
        for _ in range(CARRY_ATTEMPTS):
            hc = self._between_runs(lambda: self._hc(ns, name), timeout, notes, view=True)
            if hc is None or not migrateplan.ours(khcheck, hc):
                raise _Changed(f"HealthCheck {ns}/{name} changed hands during the rollback")
            self.res.update_with_retry(KHSTATES, ns, name, functools.partial(migrateplan.khstate_back, hc),
                                       bounds=self._bounds())
            if _version(self._hc(ns, name)) == _version(hc):
                spec = hcstate.view(hc).get("spec") or {}
                notes.insert(0, f"state copied back: last run {spec.get('LastRun') or 'none'}")
                return notes
        raise _Changed(f"the HealthCheck's state kept changing while being copied ({CARRY_ATTEMPTS} times); run again")

    # --- reads and waits ---------------------------------------------------------------------------------

    def _khstate(self, ns: str, name: str) -> Obj | None:
        try:
            return self.res.get(KHSTATES, ns, name, timeout=REQUEST_TIMEOUT)
        except NotFound:
            return None

    def _hc(self, ns: str, name: str) -> Obj | None:
        try:
            return self.res.get(HEALTHCHECKS, ns, name, timeout=REQUEST_TIMEOUT)
        except NotFound:
            return None

    def _between_runs(self, read: Callable[[], Obj | None], timeout: float, notes: list[str],
                      view: bool = False) -> Obj | None:
        """The object once no run of its check is in flight; after `timeout` and RUN_MARGIN, as it is then
        (a run claimed by a daemon that died is never finished), said in `notes`."""
        deadline = self._clock() + timeout + RUN_MARGIN
        while True:
            obj = read()
            state = hcstate.view(obj) if view and obj is not None else obj
            if not migrateplan.in_flight(state):
                return obj
            if self._clock() >= deadline or self._stop.wait(POLL):
                notes.append("a run claimed in its state did not finish in time: carried as it is")
                return obj

    def _bounds(self) -> Bounds:
        return Bounds(REQUEST_TIMEOUT, self._clock() + WRITE_BUDGET, self._clock)


class _Changed(Exception):
    """Something changed under the migration: this check is left for another run."""


def _key(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _version(obj: Obj | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("resourceVersion") or "")


def _hc_spec(obj: Obj) -> CheckSpec:
    return CheckSpec.of_healthcheck(obj, Config.healthcheck_run_interval, Config.healthcheck_timeout)


def _timeout(obj: Obj, parse: Callable[[Obj], CheckSpec]) -> float:
    """A check's run timeout, the longest a run in flight may last; the default's when unreadable."""
    try:
        return parse(obj).timeout
    except SpecProblem:
        return Config.healthcheck_timeout
