"""In-memory stand-ins for what Runner, Controller and the web app use on `services`: no API server.

FakeApi is the API server and kube.Resources in one: objects keyed by (plural, namespace, name), a
resourceVersion per write, 409 on a stale one or on creating an existing name, 404 for a missing
object, label and field selectors on list. Faults are injected per call: an error once or N times,
optionally after the write went through (an answer lost on the way back), or the whole API away.
Resources.update_with_retry is borrowed, so every khstate write runs the product's read-modify-write.

Each write reaches the FakeCaches of its kind at once; they store, index and notify the real Notifier
exactly as kube.Reflector does (topics `key` and one per index value, before and after the change), so
a run's waits wake as in production. A cache can be paused (its watch behind) or marked not current
(its watch failing).

Time is FakeClock: monotonic and wall seconds that move only when a test advances them. Advancing
wakes every waiter, so a wait whose deadline passed notices at once; FakeStop's timed wait (a run's
retry backoff) advances the clock instead of sleeping.

Kubelet moves checker pods through their phases; report() stores a checker's report the way the report
handler does. Activity lets a test wait, without polling, for what another thread does to the fakes.
readouts.py reads back what the product writes and never reads itself (a pod's env, a skip counter).

Not here: HTTP, watches, scheduling, garbage collection. Deletes are immediate, unless a pod is made
to stick in Terminating.
"""
from testbed.fakes.api import Call, FakeApi, Fault
from testbed.fakes.cache import FakeCache
from testbed.fakes.clock import Activity, FakeClock, FakeStop, stamp
from testbed.fakes.world import (
    KINDS,
    NODE,
    NS,
    POD_NAME,
    REPORTING_URL,
    V3_REPORTING_URL,
    FakeEvents,
    FakeServices,
    Kubelet,
    Subject,
    check_spec,
    fake_config,
    healthcheck,
    khcheck,
    khjob,
    khstate_of,
    report,
)

__all__ = ["KINDS", "NODE", "NS", "POD_NAME", "REPORTING_URL", "V3_REPORTING_URL", "Activity", "Call", "FakeApi",
           "FakeCache", "FakeClock", "FakeEvents", "FakeServices", "FakeStop", "Fault", "Kubelet", "Subject",
           "check_spec", "fake_config", "healthcheck", "khcheck", "khjob", "khstate_of", "report", "stamp"]
