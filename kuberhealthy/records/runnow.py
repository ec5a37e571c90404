"""Run now: a khcheck annotation that asks the leader for a run at once.

`comcast.github.io/run-now` (any value) on a khcheck means "run this check now". Whoever may patch
khchecks sets it (`kubectl annotate khcheck NAME comcast.github.io/run-now=x --overwrite`), and so
does `POST /api/checks/<ns>/<name>/run` (web/api.py) on whichever replica answers. The leader sees it
through its khcheck watch (controller.py), starts a run at once on that check's worker, which removes
the annotation as its run starts; a request that finds a run in flight is dropped and the annotation
removed. The check's schedule continues from the requested run. Annotations are not part of
CheckSpec, so setting or removing one never restarts a check.

One request, one CheckRunRequested Event: the HTTP handler raises it (source "api") for the requests
it writes, which it marks by their value (API_MARK); the leader raises it (source "annotation") for
any other value it sees newly set. A leftover annotation found when leadership begins is run without
a second Event (the replica that saw it set raised one already).

This module holds the name, the value rules and the patches; it keeps no state and decides nothing.
"""
from __future__ import annotations

from kuberhealthy.base.times import format_time
from kuberhealthy.kube import KHCHECKS, Obj, Resource
from kuberhealthy.kube.annotations import remove_annotations
from kuberhealthy.kube.protocols import Api

RUN_NOW_ANNOTATION = "comcast.github.io/run-now"
API_MARK = " (api)"  # the end of every value the HTTP handler writes: "<RFC3339> (api)"
PATCH_TIMEOUT = 5.0  # seconds for one annotation patch


def requested(obj: Obj | None) -> str | None:
    """The annotation's value when `obj` (a khcheck) asks for a run, else None."""
    annotations = ((obj or {}).get("metadata") or {}).get("annotations") or {}
    value = annotations.get(RUN_NOW_ANNOTATION) if isinstance(annotations, dict) else None
    return None if value is None else str(value)


def newly_requested(obj: Obj, prev: Obj | None) -> str | None:
    """The value when this change of a khcheck sets the annotation or gives it a new value, else None
    (a change of anything else keeps a request that was already seen from counting twice)."""
    value = requested(obj)
    return value if value is not None and value != requested(prev) else None


def by_api(value: str) -> bool:
    return value.endswith(API_MARK)


def api_value(now: float) -> str:
    """What the HTTP handler writes: when, and that it was the API (unix seconds in)."""
    return format_time(now) + API_MARK


def request_patch(value: str, resource_version: str) -> Obj:
    """A merge patch setting the annotation, conditional on the khcheck being at `resource_version`
    (the API server answers 409 if it changed meanwhile: another request may have set it)."""
    meta: Obj = {"annotations": {RUN_NOW_ANNOTATION: value}}
    if resource_version:
        meta["resourceVersion"] = resource_version
    return {"metadata": meta}


def clear(api: Api, namespace: str, name: str, timeout: float = PATCH_TIMEOUT, current: Obj | None = None,
          resource: Resource = KHCHECKS) -> bool:
    """Remove the annotation (a merge patch with null). False, logged, when the API refused or was away;
    a khcheck that is gone has nothing to clear. `current` is the cached khcheck: a version of it the API
    server refused (422: stored before its CRD validated more, it no longer validates) is logged once and
    not patched again until the khcheck changes (kube/annotations.py). `resource`: where the check lives
    (a HealthCheck's run-now annotation is cleared on the HealthCheck)."""
    meta = dict((current or {}).get("metadata") or {})
    meta.update(namespace=namespace, name=name)
    return remove_annotations(api, resource, {"metadata": meta}, [RUN_NOW_ANNOTATION], timeout)
