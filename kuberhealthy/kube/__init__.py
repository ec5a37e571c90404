"""Everything that talks to the Kubernetes API. The only package that imports `kubernetes`."""
from kuberhealthy.base.notify import Notifier
from kuberhealthy.kube.client import Kube, Obj
from kuberhealthy.kube.protocols import Api, Cache
from kuberhealthy.kube.reflector import Reflector, Selection, Storage, key_of
from kuberhealthy.kube.resources import (
    DEPLOYMENTS,
    EVENTS,
    HEALTHCHECKS,
    KHCHECKS,
    KHJOBS,
    KHSTATES,
    LEASES,
    PODS,
    TOKENREVIEWS,
    Bounds,
    Resource,
    Resources,
)

__all__ = [
    "DEPLOYMENTS",
    "EVENTS",
    "HEALTHCHECKS",
    "KHCHECKS",
    "KHJOBS",
    "KHSTATES",
    "LEASES",
    "PODS",
    "TOKENREVIEWS",
    "Api",
    "Bounds",
    "Cache",
    "Kube",
    "Notifier",
    "Obj",
    "Reflector",
    "Resource",
    "Resources",
    "Selection",
    "Storage",
    "key_of",
]
