"""Everything that talks to the Kubernetes API. The only package that imports `kubernetes`."""
from kuberhealthy.kube.client import Kube, Obj
from kuberhealthy.kube.reflector import Reflector, key_of
from kuberhealthy.kube.resources import KHCHECKS, KHJOBS, KHSTATES, LEASES, PODS, Resource, Resources
from kuberhealthy.notify import Notifier

__all__ = ["KHCHECKS", "KHJOBS", "KHSTATES", "LEASES", "PODS", "Kube", "Notifier", "Obj", "Reflector",
           "Resource", "Resources", "key_of"]
