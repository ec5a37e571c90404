"""The kinds of check the web app knows, as data: where each kind's objects are cached and live in the
API, what its Events and checker pods are called, and how its run in flight is found.

The routes that act on one check by name (run now, its Events, its checker pods' logs; v2's
`/api/checks/<ns>/<name>/run` and v3's `?namespace=&healthcheck=` routes) look the name up here
instead of in one cache, so a kind added to `check_kinds()` is served by all of them. Today: khchecks,
khjobs and HealthChecks (a khjob, and a HealthCheck with `singleRunOnly`, is read like a check but
never run on request: it runs once, when created; a kind says which of its objects run once). A
migrated khcheck is found by no name (web/shown.py): its HealthCheck runs, and answers, in its place.

`?healthcheck=` also takes a name as `/json` keys it (web/v3/summary.py): `<namespace>/<name>`, the
key of a name two checks of the listing share, and `<namespace>/<prefix><name>` (a kind's `prefix`,
`hc:` for HealthChecks), the key of the second kind of a same-named pair in one namespace.

What it does not do: read the API, or decide anything about a check (the routes do).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kuberhealthy.kube import KHCHECKS, KHJOBS, Cache, Obj, Resource
from kuberhealthy.needs import WebNeeds
from kuberhealthy.outputs.events import KIND_CHECK, KIND_JOB, ObjectRef
from kuberhealthy.records.checkpod import CHECK_NAME_LABEL
from kuberhealthy.records.checkspec import KIND_HEALTHCHECK
from kuberhealthy.web.entries import CHECK, HEALTHCHECK, JOB, current_run
from kuberhealthy.web.shown import Shown, single_run_only

KHCHECK, KHJOB = "khcheck", "khjob"
LiveRun = Callable[[str, str], "dict[str, Any] | None"]  # (namespace, name) -> entries.current_run()'s view


@dataclass(frozen=True)
class CheckKind:
    """One kind of check, as the routes need it."""

    name: str  # "khcheck" | "khjob" | "healthcheck": how answers name the kind
    entry_kind: str  # the `kind` of its entries in the JSON API (web/entries.py)
    objects: Cache  # the kind's objects
    resource: Resource  # where they live in the API (run now patches there)
    event_kind: str  # involvedObject.kind of the Events about one of them
    pod_label: str  # the checker pod label whose value is the check's name
    live_run: LiveRun  # the run in flight, or None
    runs_once: Callable[[Obj], bool] = lambda _obj: False  # True: runs once, never on request (a khjob)
    summarized: bool = True  # listed by v3's `/json`
    prefix: str = ""  # put before the name in a `/json` key that must tell it from a same-named check
    hidden: Callable[[Obj], bool] = lambda _obj: False  # True: not found by name (a migrated khcheck)

    def ref(self, obj: Obj) -> ObjectRef:
        meta = obj.get("metadata") or {}
        return ObjectRef(self.event_kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""),
                         str(meta.get("uid") or ""), self.resource.api_version)

    def owns_pod(self, pod: Obj, name: str) -> bool:
        """Whether `pod` (from the checker pod cache) is labelled as a pod of this kind's check `name`."""
        labels = (pod.get("metadata") or {}).get("labels") or {}
        return isinstance(labels, dict) and labels.get(self.pod_label) == name


@dataclass(frozen=True)
class Found:
    """A check of one kind, as its cache has it."""

    kind: CheckKind
    obj: Obj


@dataclass(frozen=True)
class Wanted:
    """A check named by a request: its namespace and name, and the kinds to look in, in that order."""

    namespace: str
    name: str
    kinds: tuple[str, ...]


class CheckKinds:
    """Every kind of check the app serves, in one order (the order a name is looked up in by default)."""

    def __init__(self, kinds: Sequence[CheckKind]) -> None:
        self.kinds = tuple(kinds)
        self._by_entry = {k.entry_kind: k for k in self.kinds}
        self._by_name = {k.name: k for k in self.kinds}

    def of_entry(self, entry_kind: str) -> CheckKind | None:
        return self._by_entry.get(entry_kind)

    def named_entries(self, name: str, asked: Sequence[str] | None) -> tuple[str, tuple[str, ...] | None]:
        """A name as the JSON API and the dashboard take it in a path (`hc:<name>`: a prefixed kind's), and
        `?kind=`'s entry kinds (`asked`; None: any): the bare name and the entry kinds it may be of."""
        for kind in self.kinds:
            if kind.prefix and name.startswith(kind.prefix):
                only = kind.entry_kind
                return name[len(kind.prefix):], tuple(k for k in asked if k == only) if asked is not None else (only,)
        return name, tuple(asked) if asked is not None else None

    def names_of_entries(self, entry_kinds: Sequence[str]) -> tuple[str, ...]:
        """The kinds' names of these entry kinds (`?kind=` of the JSON API), unknown ones left out."""
        return tuple(k.name for e in entry_kinds if (k := self._by_entry.get(e)) is not None)

    def named(self, name: str) -> CheckKind | None:
        return self._by_name.get(name)

    def find(self, wanted: Wanted) -> list[Found]:
        """The checks of that name, one per kind that has one, in `wanted.kinds` order (kinds not known
        here are skipped)."""
        found = []
        for kind_name in wanted.kinds:
            kind = self._by_name.get(kind_name)
            if kind is None:
                continue
            obj = kind.objects.get(wanted.namespace, wanted.name)
            if obj is not None and not kind.hidden(obj):
                found.append(Found(kind, obj))
        return found

    def wanted(self, namespace: str, healthcheck: str, prefer: Sequence[str]) -> Wanted | str:
        """The check `?namespace=&healthcheck=` names (looked up in `prefer` order), or why none is (the
        400's reason). `healthcheck` may be a `/json` key: `<ns>/<name>` or `<ns>/<prefix><name>`."""
        namespace, healthcheck = namespace.strip(), healthcheck.strip()
        kinds = tuple(prefer)
        if "/" in healthcheck:
            key_ns, _, healthcheck = healthcheck.partition("/")
            if namespace and key_ns != namespace:
                return f"healthcheck {key_ns}/{healthcheck} is not in namespace {namespace}"
            namespace = key_ns
            for kind in self.kinds:
                if kind.prefix and healthcheck.startswith(kind.prefix):
                    healthcheck, kinds = healthcheck[len(kind.prefix):], (kind.name,)
                    break
            else:  # `<ns>/<name>` keys the unprefixed kind of a same-named pair: look there first
                kinds = tuple(sorted(kinds, key=lambda n: bool((k := self._by_name.get(n)) and k.prefix)))
        if not namespace or not healthcheck:
            return "both namespace and healthcheck are required"
        return Wanted(namespace, healthcheck, kinds)


def check_kinds(services: WebNeeds) -> CheckKinds:
    """The kinds of check of this daemon, khchecks first (HealthChecks when the daemon runs them)."""
    def live(namespace: str, name: str) -> dict[str, Any] | None:
        return current_run(services.khstates.get(namespace, name), services.pods)

    v3 = services.kinds.named(KIND_HEALTHCHECK)
    shown = Shown(services.khchecks, services.khjobs, v3.checks if v3 is not None else None)
    kinds = [
        CheckKind(KHCHECK, CHECK, services.khchecks, KHCHECKS, KIND_CHECK, CHECK_NAME_LABEL, live,
                  hidden=shown.khcheck_hidden),
        CheckKind(KHJOB, JOB, services.khjobs, KHJOBS, KIND_JOB, CHECK_NAME_LABEL, live,
                  runs_once=lambda _obj: True, summarized=False),
    ]
    if v3 is not None:
        states = v3.states

        def live_v3(namespace: str, name: str) -> dict[str, Any] | None:
            return current_run(states.get(namespace, name), services.pods)
        kinds.append(CheckKind(v3.name, HEALTHCHECK, v3.checks, v3.resource, v3.event_kind, v3.pod_label, live_v3,
                               runs_once=single_run_only, prefix=v3.prefix))
    return CheckKinds(kinds)
