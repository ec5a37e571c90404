"""Removing an annotation from a custom resource the API server will no longer change.

Kubernetes 1.20 has no validation ratcheting: once a CRD validates more (the khcheck CRD's PodSpec schema
and duration patterns), a custom resource stored before that no longer passes cannot be changed at all,
not even its annotations, until someone fixes it: every PATCH answers 422 Invalid. The daemon removes
annotations it has acted on (run-now; an expired pause would be the same), and a removal tried on every
trigger would be refused every time. remove_annotations() tries once per version of the object: a 422
is logged once, naming its reason and the field the API server names, and the same resourceVersion is
not patched again; a change of the object (a new resourceVersion: its spec fixed, say) lets it try again.

What is remembered is a fact about the stored object (uid + resourceVersion), not about this replica, so
one bounded memory serves the whole process.
"""
from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from kuberhealthy.base.errors import ApiError, Invalid, NotFound
from kuberhealthy.kube.client import Obj
from kuberhealthy.kube.protocols import Api
from kuberhealthy.kube.resources import Resource

logger = logging.getLogger(__name__)

MESSAGE_CHARS = 300  # of the API server's message in the log line (a pattern it quotes can be long)


class Refusals:
    """Object versions (resource, uid, resourceVersion) the API server refused to patch; bounded."""

    def __init__(self, limit: int = 4096) -> None:
        self._limit = limit
        self._lock = threading.Lock()
        self._refused: OrderedDict[tuple[str, str], str] = OrderedDict()  # (plural, uid) -> resourceVersion
        self._busy: dict[tuple[str, str], threading.Lock] = {}  # one removal at a time per object

    def one_at_a_time(self, plural: str, uid: str) -> threading.Lock:
        """The lock that keeps two removals from the same object (a worker's and the controller's) from
        both being refused: the second waits, then finds the version refused."""
        with self._lock:
            if len(self._busy) > self._limit:
                self._busy = {k: v for k, v in self._busy.items() if v.locked()}
            return self._busy.setdefault((plural, uid), threading.Lock())

    def refused(self, plural: str, uid: str, resource_version: str) -> bool:
        with self._lock:
            return bool(uid and resource_version) and self._refused.get((plural, uid)) == resource_version

    def remember(self, plural: str, uid: str, resource_version: str) -> None:
        if not (uid and resource_version):
            return  # a version we cannot recognise again: nothing to remember it by
        with self._lock:
            self._refused[(plural, uid)] = resource_version
            self._refused.move_to_end((plural, uid))
            while len(self._refused) > self._limit:
                self._refused.popitem(last=False)

    def forget(self, plural: str, uid: str) -> None:
        with self._lock:
            self._refused.pop((plural, uid), None)


REFUSALS = Refusals()


def remove_annotations(api: Api, res: Resource, obj: Obj, keys: Sequence[str], timeout: float,
                       refusals: Refusals = REFUSALS) -> bool:
    """Remove these annotations from `obj` (the cached object: its namespace, name, uid and version) with
    one merge patch. True when removed or the object is gone; False when not: the API server away or
    refusing (logged), or this very version refused before (not tried again, not logged again)."""
    version = _Version.of(obj)
    with refusals.one_at_a_time(res.plural, version.uid):
        return _remove(api, res, version, keys, timeout, refusals)


@dataclass(frozen=True)
class _Version:
    """Which object, at which version: what a refusal is remembered by."""

    namespace: str
    name: str
    uid: str
    version: str

    @classmethod
    def of(cls, obj: Obj) -> _Version:
        meta = obj.get("metadata") or {}
        return cls(str(meta.get("namespace") or ""), str(meta.get("name") or ""), str(meta.get("uid") or ""),
                   str(meta.get("resourceVersion") or ""))


def _remove(api: Api, res: Resource, obj: _Version, keys: Sequence[str], timeout: float,
            refusals: Refusals) -> bool:
    namespace, name, uid, version = obj.namespace, obj.name, obj.uid, obj.version
    what = f"{res.plural} {namespace}/{name}"
    if refusals.refused(res.plural, uid, version):
        return False
    patch: Obj = {"metadata": {"annotations": dict.fromkeys(keys)}}
    try:
        api.merge_patch(res, namespace, name, patch, timeout=timeout)
    except NotFound:
        return True
    except Invalid as e:
        refusals.remember(res.plural, uid, version)
        logger.warning("%s: the API server refuses to remove the %s annotation (422 %s: %s): the stored object "
                       "no longer passes its CRD's validation; it stays until the object is fixed, and is not "
                       "tried again before the object changes", what, ", ".join(keys), e.reason or "Invalid",
                       str(e)[:MESSAGE_CHARS])
        return False
    except ApiError as e:
        logger.warning("%s: cannot remove the %s annotation: %s", what, ", ".join(keys), e)
        return False
    refusals.forget(res.plural, uid)
    return True
