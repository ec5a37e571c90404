"""Observers for fault scenarios: what the daemon wrote, which checker pods were live, what `/` answered.

They watch from outside the product and import none of it, so a bug in the product cannot hide
itself from them, and each survives API server outages on its own terms:

- AuditTail reads the API server's audit log, which the test bed keeps across restarts and where every
  khstate write carries its request body (testbed/cluster/apiserver.py AUDIT_POLICY): every OK/Errors the
  daemon managed to write is there, whatever the daemon's own caches or logs say.
- PodObserver keeps a list+watch of checker pods (label app=kuberhealthy-check), re-listing after every
  broken stream so a missed DELETED can never leave a phantom live pod, and records the largest number
  of live (no deletionTimestamp, phase Pending/Running) pods per check, with the names when it is > 1.
- EndpointPoller GETs one URL at a fixed rate with a short client timeout and counts the 200s.

Timestamps are wall-clock seconds (time.time()), the clock the audit log uses.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import urllib3

from testbed.clients.formats import parse_rfc3339
from testbed.cluster.builders import APP_SELECTOR, CHECK_LABEL, RUN_ID_LABEL
from testbed.sim.rawapi import OpenStream

logger = logging.getLogger(__name__)

REPORTED_UUID = "kuberhealthy.comcast.github.io/reported-uuid"
OBSERVER_AGENT = "kh-fault-observer"
WRITE_VERBS = ("create", "update", "patch")


# --- khstate writes, from the audit log -------------------------------------------------------------

@dataclass(frozen=True)
class Write:
    """One successful khstate write, merged over the check's previous state (patches are partial)."""

    at: float
    check: str  # ns/name
    verb: str
    user_agent: str
    ok: bool
    errors: tuple[str, ...]
    last_run: str
    uuid: str
    reported_uuid: str


@dataclass(frozen=True)
class Failure:
    """A distinct failure result written for a check: OK false with these errors at this LastRun."""

    check: str
    last_run: str
    errors: tuple[str, ...]
    uuid: str
    first_seen: float
    source: str  # "audit" or "status page"


class AuditTail:
    """Incrementally parses khstate writes from the audit log (call poll() from one thread)."""

    def __init__(self, path: Path, namespace: str, offset: int = 0) -> None:
        self._path = path
        self._ns = namespace
        self._offset = offset
        self._partial = b""
        self._state: dict[str, dict[str, Any]] = {}
        self.writes: list[Write] = []
        self.events = 0

    def poll(self) -> list[Write]:
        """Parse what was appended since the last call; return the new writes."""
        try:
            with open(self._path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        self._offset += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()  # an incomplete last line waits for the next poll
        new: list[Write] = []
        for line in lines:
            if not line.strip():
                continue
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            self.events += 1
            w = self._write_of(ev)
            if w is not None:
                new.append(w)
        self.writes.extend(new)
        return new

    def _write_of(self, ev: dict[str, Any]) -> Write | None:
        ref = ev.get("objectRef") or {}
        code = int((ev.get("responseStatus") or {}).get("code") or 0)
        if (ref.get("resource") != "khstates" or ref.get("namespace") != self._ns or ev.get("verb") not in WRITE_VERBS
                or ev.get("stage") != "ResponseComplete" or not 200 <= code <= 299):
            return None
        body = ev.get("requestObject")
        name = ref.get("name") or ((body or {}).get("metadata") or {}).get("name")
        if not isinstance(body, dict) or not name:
            return None
        check = f"{self._ns}/{name}"
        prev = self._state.get(check, {})
        spec = dict(prev.get("spec") or {})
        spec.update(body.get("spec") or {})
        annotations = dict(prev.get("annotations") or {})
        annotations.update(((body.get("metadata") or {}).get("annotations")) or {})
        self._state[check] = {"spec": spec, "annotations": annotations}
        errors = spec.get("Errors") or []
        at = parse_rfc3339(str(ev.get("stageTimestamp") or ev.get("requestReceivedTimestamp"))).timestamp()
        return Write(at=at,
                     check=check, verb=str(ev.get("verb")), user_agent=str(ev.get("userAgent") or ""),
                     ok=bool(spec.get("OK", False)),
                     errors=tuple(str(e) for e in errors) if isinstance(errors, list) else (str(errors),),
                     last_run=str(spec.get("LastRun") or ""), uuid=str(spec.get("uuid") or ""),
                     reported_uuid=str(annotations.get(REPORTED_UUID) or ""))

    def failures(self, since: float = 0.0, until: float = float("inf")) -> list[Failure]:
        """Distinct OK:false results written in [since, until] (a run claim that carries an old failure
        over is the same failure, not a new one)."""
        seen: dict[tuple[str, str, tuple[str, ...]], Failure] = {}
        for w in self.writes:
            if w.ok or not since <= w.at <= until:
                continue
            key = (w.check, w.last_run, w.errors)
            if key not in seen:
                seen[key] = Failure(w.check, w.last_run, w.errors, w.uuid, w.at, "audit")
        return list(seen.values())

    def good_runs(self) -> dict[str, list[float]]:
        """Per check, when each new good result was written: OK true with a LastRun or reported run
        that differs from the check's previous write."""
        out: dict[str, list[float]] = defaultdict(list)
        last: dict[str, tuple[str, str, bool]] = {}
        for w in self.writes:
            marker = (w.last_run, w.reported_uuid, w.ok)
            if w.ok and w.last_run and last.get(w.check) != marker:
                out[w.check].append(w.at)
            last[w.check] = marker
        return out


# --- checker pods -----------------------------------------------------------------------------------

@dataclass
class Overlap:
    check: str
    at: float
    pods: tuple[str, ...]


class PodObserver:
    """List+watch of checker pods in one namespace, straight to the API server (not via any proxy)."""

    def __init__(self, server: str, token: str, namespace: str) -> None:
        self._base = f"{server}/api/v1/namespaces/{namespace}/pods"
        self._session = requests.Session()
        self._session.headers.update({"Authorization": f"Bearer {token}", "User-Agent": OBSERVER_AGENT})
        self._lock = threading.Lock()
        self._pods: dict[str, tuple[str, bool]] = {}  # pod name -> (check, live)
        self.max_live: dict[str, int] = defaultdict(int)
        self.overlaps: list[Overlap] = []
        self.pod_of_run: dict[str, str] = {}  # run uuid -> pod name
        self.created: dict[str, float] = {}  # pod name -> first seen (wall)
        self.relists = 0  # successful lists; 0 at the end means the observer saw nothing (an instrument failure)
        self._stop = threading.Event()
        self._stream = OpenStream()
        self._thread = threading.Thread(target=self._run, name="fault-pod-observer", daemon=True)

    def start(self) -> PodObserver:
        urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._stream.cut()  # unblocks the reading thread at once
        self._thread.join(30)
        self._session.close()

    def live_now(self) -> int:
        with self._lock:
            return sum(1 for _, live in self._pods.values() if live)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                rv = self._relist()
                self._watch(rv)
            except Exception as e:  # noqa: BLE001 - the observer outlives every outage: re-list and go on
                logger.debug("pod observer: %s; re-listing", e)
                self._stop.wait(0.5)

    def _relist(self) -> str:
        # verify=False on every call: a session-level False loses to REQUESTS_CA_BUNDLE in the environment.
        r = self._session.get(self._base, params={"labelSelector": APP_SELECTOR}, timeout=(3, 10), verify=False)
        r.raise_for_status()
        doc = r.json()
        with self._lock:
            self._pods.clear()
            self.relists += 1
        for pod in doc.get("items") or []:
            self._apply("ADDED", pod)
        return str((doc.get("metadata") or {}).get("resourceVersion") or "")

    def _watch(self, rv: str) -> None:
        params = {"labelSelector": APP_SELECTOR, "watch": "true", "resourceVersion": rv,
                  "allowWatchBookmarks": "true", "timeoutSeconds": "15"}
        with self._session.get(self._base, params=params, stream=True, timeout=(3, 20), verify=False) as r:
            r.raise_for_status()
            self._stream.set(r)
            try:
                for line in r.iter_lines():
                    if self._stop.is_set():
                        return
                    if not line:
                        continue
                    ev = json.loads(line)
                    if ev.get("type") == "ERROR":
                        raise RuntimeError(f"watch error: {ev.get('object')}")
                    if ev.get("type") != "BOOKMARK":
                        self._apply(str(ev.get("type")), ev.get("object") or {})
            finally:
                self._stream.set(None)

    def _apply(self, etype: str, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        name, check = str(meta.get("name")), f"{meta.get('namespace')}/{labels.get(CHECK_LABEL, '?')}"
        phase = (pod.get("status") or {}).get("phase") or "Pending"
        live = etype != "DELETED" and not meta.get("deletionTimestamp") and phase in ("Pending", "Running")
        now = time.time()
        with self._lock:
            if labels.get(RUN_ID_LABEL):
                self.pod_of_run[str(labels[RUN_ID_LABEL])] = name
            self.created.setdefault(name, now)
            if etype == "DELETED":
                self._pods.pop(name, None)
            else:
                self._pods[name] = (check, live)
            if not live:
                return
            same = tuple(sorted(n for n, (c, lv) in self._pods.items() if c == check and lv))
            self.max_live[check] = max(self.max_live[check], len(same))
            if len(same) > 1 and not any(o.check == check and o.pods == same for o in self.overlaps):
                self.overlaps.append(Overlap(check, now, same))


# --- HTTP availability ------------------------------------------------------------------------------

@dataclass
class Availability:
    url: str
    ok: int = 0
    total: int = 0
    failures: list[tuple[float, str]] = field(default_factory=list)  # (when, what), first 50 only

    @property
    def percent(self) -> float:
        return 100.0 * self.ok / self.total if self.total else 0.0


class EndpointPoller:
    """GET url every `period` seconds with a `timeout` client timeout until stop(); counts 200s.

    `on_body` (optional) sees every 200 body, e.g. to spot a check shown as failed on `/`."""

    def __init__(self, url: str, period: float = 0.5, timeout: float = 2.0,
                 on_body: Any = None) -> None:
        self.result = Availability(url)
        self._period = period
        self._timeout = timeout
        self._on_body = on_body
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"fault-poll-{url}", daemon=True)

    def start(self) -> EndpointPoller:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self._timeout + 5)

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            what = ""
            try:
                r = requests.get(self.result.url, timeout=self._timeout)
                if r.status_code == 200:
                    self.result.ok += 1
                    if self._on_body is not None:
                        self._on_body(r.content)
                else:
                    what = f"HTTP {r.status_code}"
            except requests.RequestException as e:
                what = type(e).__name__
            self.result.total += 1
            if what and len(self.result.failures) < 50:
                self.result.failures.append((time.time(), what))
            next_at += self._period
            self._stop.wait(max(0.0, next_at - time.monotonic()))


class StatusPageFailures:
    """Collects checks shown with OK false on `/` bodies (an on_body callback; thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.found: dict[tuple[str, str, tuple[str, ...]], Failure] = {}
        self.bad_json = 0

    def __call__(self, body: bytes) -> None:
        try:
            details = (json.loads(body).get("CheckDetails")) or {}
        except (ValueError, AttributeError):
            with self._lock:
                self.bad_json += 1
            return
        now = time.time()
        for check, d in details.items():
            if not isinstance(d, dict) or d.get("OK", True):
                continue
            errors = tuple(str(e) for e in d.get("Errors") or [])
            key = (check, str(d.get("LastRun") or ""), errors)
            with self._lock:
                if key not in self.found:
                    self.found[key] = Failure(check, key[1], errors, str(d.get("uuid") or ""), now, "status page")


def scrape_skipped(metrics_text: str) -> dict[str, float]:
    """kuberhealthy_runs_skipped_total by reason, from Prometheus text ({} when absent)."""
    out: dict[str, float] = {}
    for line in metrics_text.split("\n"):
        if not line.startswith("kuberhealthy_runs_skipped_total"):
            continue
        head, _, value = line.rpartition(" ")
        reason = "?"
        if 'reason="' in head:
            reason = head.split('reason="', 1)[1].split('"', 1)[0]
        try:
            out[reason] = out.get(reason, 0.0) + float(value)
        except ValueError:
            continue
    return out
