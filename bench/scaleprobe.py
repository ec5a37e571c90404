"""The instruments `bench.scale` reads: watches, a /proc sampler, a status-page poller, audit and metrics.

Each one measures the daemon from outside, independently of its own code and numbers:
  ApiWatch     list + watch of one API path with raw JSON (its own user agent, so audit counts leave it
               out); calls a callback with the monotonic time each object version was first seen.
  PodLog       the first time each checker pod was seen, per check (the schedule-lag clock), and its kind.
  StateLog     every distinct state version seen (the false-failure record): khstates, or with
               read=healthcheck_version a HealthCheck's status.
  TreeSampler  a process tree's CPU (utime+stime, children included), PSS, RSS and threads from /proc.
  Poller       `GET /` at a fixed rate (open loop: a slow answer does not delay the next request).
  Scraper      `GET /metrics` every N seconds from the daemon's start, as a Prometheus server would, so the
               readers' first (cold) reads fall in the warm-up and the window sees their steady cost.
  scrape_histogram  the daemon's own histogram.
  audit_since(count_audit | audit_answers | owner_counter(..))  the API server's audit log since a mark,
               across its rotations: requests by kind, answers outside 2xx, requests by the check kind
               they serve (one scan: audit_requests).
Nothing here is imported by the product, and nothing here writes to the API server.
"""
from __future__ import annotations

import datetime as dt
import http.client
import json
import logging
import os
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3
from kubernetes.watch.watch import iter_resp_lines
from prometheus_client.parser import text_string_to_metric_families

from testbed.sim.rawapi import OpenStream
from testbed.stats import CLK_TCK, stat_fields

logger = logging.getLogger(__name__)

HARNESS_UA = "kh-scale-bench"
WATCH_SECONDS = 60
PAGE = os.sysconf("SC_PAGE_SIZE")


def parse_time(value: str | None) -> float | None:
    """An RFC 3339 timestamp as unix seconds (None if missing or unreadable)."""
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


# --- watches -----------------------------------------------------------------------------------------

class ApiWatch:
    """List, then watch `path` from the list's resourceVersion; resume after errors, re-list on 410."""

    def __init__(self, server: str, token: str, path: str,
                 on_event: Callable[[str, dict[str, Any], float], None], name: str) -> None:
        self.url = server + path
        self._on_event = on_event
        self._http = urllib3.PoolManager(cert_reqs="CERT_NONE", num_pools=1, maxsize=2)
        self._headers = {"Authorization": f"Bearer {token}", "User-Agent": HARNESS_UA,
                         "Accept": "application/json"}
        self._stop = threading.Event()
        self.synced = threading.Event()
        self.restarts = 0  # watch requests that ended in an error (each resumed)
        self.relists = 0
        self._rv = ""
        self._stream = OpenStream()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> ApiWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._stream.cut()
        self._thread.join(15)
        self._http.clear()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                if not self._rv:
                    self._rv = self._list()
                    self.relists += 1
                    self.synced.set()
                self._watch_once()
            except Exception:  # top of the loop: note it, back off, resume
                if self._stop.is_set():
                    break
                self.restarts += 1
                logger.warning("watch %s broke; resuming", self.url, exc_info=True)
                self._stop.wait(0.5)

    def _list(self) -> str:
        r = self._http.request("GET", self.url, headers=self._headers,
                               timeout=urllib3.Timeout(connect=5, read=60))
        if r.status != 200:
            raise RuntimeError(f"list answered {r.status}")
        body = json.loads(r.data)
        now = time.monotonic()
        for item in body.get("items") or []:
            self._on_event("ADDED", item, now)
        return str((body.get("metadata") or {}).get("resourceVersion") or "")

    def _watch_once(self) -> None:
        query = urllib.parse.urlencode({"watch": "true", "resourceVersion": self._rv,
                                        "allowWatchBookmarks": "true", "timeoutSeconds": WATCH_SECONDS})
        resp = self._http.request("GET", f"{self.url}?{query}", headers=self._headers, preload_content=False,
                                  timeout=urllib3.Timeout(connect=5, read=WATCH_SECONDS + 15))
        self._stream.set(resp)
        try:
            if resp.status != 200:
                raise RuntimeError(f"watch answered {resp.status}")
            for line in iter_resp_lines(resp):  # type: ignore[no-untyped-call]
                if self._stop.is_set() or not line:
                    continue
                now = time.monotonic()
                event = json.loads(line)
                kind, obj = str(event.get("type")), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        self._rv = ""
                        return
                    raise RuntimeError(f"watch error event: {obj}")
                self._rv = str((obj.get("metadata") or {}).get("resourceVersion") or self._rv)
                if kind != "BOOKMARK":
                    self._on_event(kind, obj, now)
        except (urllib3.exceptions.HTTPError, OSError):
            if not self._stop.is_set():
                raise
        finally:
            self._stream.set(None)
            resp.release_conn()


KIND_KHCHECK, KIND_HEALTHCHECK = "khcheck", "healthcheck"
HC_LABEL = "healthcheck"  # a HealthCheck's checker pod carries healthcheck=<name>


@dataclass
class PodSeen:
    name: str
    uid: str
    check: str
    seen: float  # monotonic, first event that showed this pod
    created: float | None  # creationTimestamp, unix seconds (1 s resolution)
    kind: str = KIND_KHCHECK  # KIND_HEALTHCHECK for a pod labelled healthcheck=<its check>


class PodLog:
    """First sight of every checker pod (label kuberhealthy-check-name), by uid."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.pods: dict[str, PodSeen] = {}

    def on_event(self, kind: str, pod: dict[str, Any], now: float) -> None:
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        labels = meta.get("labels") or {}
        check = str(labels.get("kuberhealthy-check-name") or labels.get(HC_LABEL) or "")
        if not uid or not check:
            return
        kind = KIND_HEALTHCHECK if labels.get(HC_LABEL) == check else KIND_KHCHECK
        with self._lock:
            if uid not in self.pods:
                self.pods[uid] = PodSeen(str(meta.get("name")), uid, check, now,
                                         parse_time(meta.get("creationTimestamp")), kind)

    def by_check(self, kind: str | None = None) -> dict[str, list[PodSeen]]:
        """Pods by check, first seen first (only the checks of `kind` when given)."""
        with self._lock:
            pods = [p for p in self.pods.values() if kind is None or p.kind == kind]
        out: dict[str, list[PodSeen]] = {}
        for p in sorted(pods, key=lambda p: p.seen):
            out.setdefault(p.check, []).append(p)
        return out


@dataclass(frozen=True)
class StateVersion:
    seen: float  # monotonic
    rv: str
    ok: bool
    last_run: str
    errors: tuple[str, ...]
    uuid: str
    run_duration: str


def _errors(errors: Any) -> tuple[str, ...]:
    return tuple(str(e) for e in errors) if isinstance(errors, list) else ()


def khstate_version(obj: dict[str, Any], now: float) -> StateVersion:
    """A khstate as a StateVersion."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    return StateVersion(now, str(meta.get("resourceVersion") or ""), bool(spec.get("OK", False)),
                        str(spec.get("LastRun") or ""), _errors(spec.get("Errors") or []),
                        str(spec.get("uuid") or ""), str(spec.get("RunDuration") or ""))


def healthcheck_version(obj: dict[str, Any], now: float) -> StateVersion:
    """A HealthCheck's status (v3's names: ok, errors, lastRunUnix, runDuration in ns) as a StateVersion.
    A status holding no result yet (no lastRunUnix, no errors) reads as OK: nothing has failed."""
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    errors = _errors(status.get("errors") or [])
    last_run = str(status.get("lastRunUnix") or "")
    ok = bool(status.get("ok", False)) or not (last_run or errors)
    return StateVersion(now, str(meta.get("resourceVersion") or ""), ok, last_run if last_run != "0" else "",
                        errors, str(status.get("currentUUID") or ""), str(status.get("runDuration") or ""))


class StateLog:
    """Every distinct state version, in the order seen, by object name (a khstate, or with
    read=healthcheck_version a HealthCheck's status)."""

    def __init__(self, read: Callable[[dict[str, Any], float], StateVersion] = khstate_version) -> None:
        self._lock = threading.Lock()
        self._read = read
        self.versions: dict[str, list[StateVersion]] = {}

    def on_event(self, kind: str, obj: dict[str, Any], now: float) -> None:
        if kind == "DELETED":
            return
        meta = obj.get("metadata") or {}
        v = self._read(obj, now)
        with self._lock:
            seq = self.versions.setdefault(str(meta.get("name")), [])
            if not seq or seq[-1].rv != v.rv:
                seq.append(v)

    def snapshot(self) -> dict[str, list[StateVersion]]:
        with self._lock:
            return {k: list(v) for k, v in self.versions.items()}

    def completed_first_run(self) -> int:
        """khstates that hold a finished run: a result with RunDuration, or a recorded failure."""
        with self._lock:
            return sum(1 for seq in self.versions.values()
                       if any((v.run_duration and v.last_run) or not v.ok for v in seq))


# --- /proc ---------------------------------------------------------------------------------------------

def process_tree(root: int) -> list[int]:
    """root and all its descendants that are alive now (from /proc/*/stat ppid)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            f = stat_fields(int(entry))
            if f is not None:
                children.setdefault(int(f[1]), []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        if Path(f"/proc/{pid}").exists():
            out.append(pid)
            todo.extend(children.get(pid, []))
    return out


def machine_busy_seconds() -> float:
    """CPU-seconds all cores spent not idle since boot (/proc/stat)."""
    vals = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
    return (sum(vals[:8]) - idle) / CLK_TCK


def _kb(path: str, key: str) -> int:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


@dataclass
class TreeSampler:
    """Samples one process tree every `every` seconds; keeps the peaks of PSS, RSS and threads (sums)."""

    root: int
    every: float = 2.0
    peak_pss_kb: int = 0
    peak_rss_kb: int = 0
    peak_threads: int = 0
    peak_processes: int = 0
    samples: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def sample(self) -> None:
        pids = process_tree(self.root)
        pss = sum(_kb(f"/proc/{p}/smaps_rollup", "Pss:") for p in pids)
        rss = sum(_kb(f"/proc/{p}/status", "VmRSS:") for p in pids)
        threads = sum(_kb(f"/proc/{p}/status", "Threads:") for p in pids)
        self.peak_pss_kb = max(self.peak_pss_kb, pss)
        self.peak_rss_kb = max(self.peak_rss_kb, rss)
        self.peak_threads = max(self.peak_threads, threads)
        self.peak_processes = max(self.peak_processes, len(pids))
        self.samples += 1

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.sample()
            except Exception:  # top of the loop: a vanished process must not end the sampling
                logger.exception("sampling pid %d failed", self.root)

    def start(self) -> TreeSampler:
        self._thread = threading.Thread(target=self._loop, name=f"sampler-{self.root}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)


# --- the status page poller ----------------------------------------------------------------------------

@dataclass
class Poll:
    at: float  # monotonic send time
    seconds: float
    outcome: str  # "ok", "timeout", "error: ...", "HTTP 503"


class Poller:
    """`GET /` every 1/rate seconds, each request on its own pool thread with a client timeout."""

    def __init__(self, host: str, port: int, rate: float = 2.0, timeout: float = 15.0) -> None:
        self.host, self.port, self.period, self.timeout = host, port, 1.0 / rate, timeout
        self.polls: list[Poll] = []
        self.skipped = 0  # sends dropped because too many requests were still open
        self._lock = threading.Lock()
        self._inflight = 0
        self._max_inflight = int(timeout * rate) + 4
        self._pool = ThreadPoolExecutor(max_workers=self._max_inflight, thread_name_prefix="poll")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="poller", daemon=True)

    def _one(self, at: float) -> None:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        outcome = "ok"
        try:
            conn.request("GET", "/", headers={"User-Agent": HARNESS_UA})
            resp = conn.getresponse()
            resp.read()
            if resp.status != 200:
                outcome = f"HTTP {resp.status}"
        except TimeoutError:
            outcome = "timeout"
        except (OSError, http.client.HTTPException) as e:
            outcome = f"error: {type(e).__name__}"
        finally:
            conn.close()
        with self._lock:
            self.polls.append(Poll(at, time.monotonic() - at, outcome))
            self._inflight -= 1

    def _loop(self) -> None:
        next_at = time.monotonic()
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            with self._lock:
                full = self._inflight >= self._max_inflight
                if not full:
                    self._inflight += 1
            if full:
                self.skipped += 1
            else:
                self._pool.submit(self._one, time.monotonic())
            next_at += self.period

    def start(self) -> Poller:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sending; wait (bounded by the client timeout) for the requests still open."""
        self._stop.set()
        self._thread.join(5)
        self._pool.shutdown(wait=True)


class Scraper:
    """`GET /metrics` every `period` seconds (closed loop, one at a time), until stopped."""

    def __init__(self, host: str, port: int, period: float = 15.0, timeout: float = 15.0) -> None:
        self.host, self.port, self.period, self.timeout = host, port, period, timeout
        self.seconds: list[float] = []  # answered scrapes' durations
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="scraper", daemon=True)

    def _one(self) -> None:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        at = time.monotonic()
        try:
            conn.request("GET", "/metrics", headers={"User-Agent": HARNESS_UA})
            resp = conn.getresponse()
            resp.read()
            if resp.status == 200:
                self.seconds.append(time.monotonic() - at)
            else:
                self.failed += 1
        except (OSError, http.client.HTTPException):
            self.failed += 1
        finally:
            conn.close()

    def _loop(self) -> None:
        next_at = time.monotonic()
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            self._one()
            next_at += self.period

    def start(self) -> Scraper:
        if self.period > 0:
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(self.timeout + 1)


# --- the daemon's own histogram, and the audit log -------------------------------------------------------

def scrape_histogram(host: str, port: int, family: str, timeout: float = 15.0) -> dict[str, Any] | None:
    """count, sum and cumulative buckets of a histogram on /metrics, summed over label sets.

    None when /metrics did not answer; {"absent": True} when it answered without the family."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", "/metrics", headers={"User-Agent": HARNESS_UA})
        resp = conn.getresponse()
        text = resp.read().decode("utf-8", errors="replace")
        if resp.status != 200:
            return None
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()
    count = total = 0.0
    buckets: dict[float, float] = {}
    found = False
    for fam in text_string_to_metric_families(text):
        if fam.name != family:
            continue
        found = True
        for s in fam.samples:
            if s.name.endswith("_count"):
                count += s.value
            elif s.name.endswith("_sum"):
                total += s.value
            elif s.name.endswith("_bucket"):
                le = float(s.labels.get("le", "inf"))
                buckets[le] = buckets.get(le, 0.0) + s.value
    if not found:
        return {"absent": True}
    return {"absent": False, "count": count, "sum": total, "buckets": dict(buckets)}


def histogram_delta(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any]:
    """count, mean and a p99 upper bound (the bucket edge) of the observations between two scrapes."""
    if after is None:
        return {"state": "no answer from /metrics"}
    if after.get("absent"):
        return {"state": "absent"}
    empty: dict[str, Any] = {"count": 0.0, "sum": 0.0, "buckets": {}}
    base = before if before and not before.get("absent") else empty
    count = after["count"] - base["count"]
    total = after["sum"] - base["sum"]
    edges = sorted(after["buckets"])
    p99 = None
    if count > 0:
        for le in edges:
            if after["buckets"][le] - base["buckets"].get(le, 0.0) >= 0.99 * count:
                p99 = le
                break
    return {"state": "present", "count": count, "mean": total / count if count else None, "p99_le": p99,
            "since_start": base is not before}


AuditCounter = Callable[[Path, int, float, float, str], Counter[str]]


def audit_requests(path: Path, offset: int, t0: float, t1: float, agent_prefix: str) -> Iterator[dict[str, Any]]:
    """The audit log's completed non-watch requests with a user agent starting with agent_prefix, received
    in [t0, t1] (unix s), read from byte `offset` on (an offset inside a line skips the rest of it)."""
    needle = f'"userAgent":"{agent_prefix}'.encode()
    with open(path, "rb") as f:
        f.seek(max(0, offset - 1))
        if offset and f.read(1) != b"\n":
            f.readline()
        for line in f:
            if needle not in line:
                continue
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("verb") == "watch" or e.get("stage") != "ResponseComplete":
                continue
            at = parse_time(e.get("requestReceivedTimestamp"))
            if at is not None and t0 <= at <= t1:
                yield e


def request_kind(e: dict[str, Any]) -> str:
    """`verb resource[/subresource]` of an audit entry."""
    ref = e.get("objectRef") or {}
    res = str(ref.get("resource") or e.get("requestURI", "?"))
    return f"{e.get('verb')} {res}" + (f"/{ref['subresource']}" if ref.get("subresource") else "")


def count_audit(path: Path, offset: int, t0: float, t1: float, agent_prefix: str) -> Counter[str]:
    """audit_requests() by kind: `verb resource[/subresource]`."""
    return Counter(request_kind(e) for e in audit_requests(path, offset, t0, t1, agent_prefix))


def request_owner(e: dict[str, Any], hc_prefix: str) -> str:
    """The check kind an audit entry served: khstates, khchecks and khjobs are a khcheck's, healthchecks
    (and healthchecks/status) a HealthCheck's; pods and Events by their name (a HealthCheck's checks are
    named with hc_prefix, its pods and Events start with the check's name); anything else is "shared"."""
    ref = e.get("objectRef") or {}
    resource, name = str(ref.get("resource") or ""), str(ref.get("name") or "")
    if resource == "healthchecks":
        return KIND_HEALTHCHECK
    if resource in ("khstates", "khchecks", "khjobs"):
        return KIND_KHCHECK
    if resource in ("pods", "events") and name:
        return KIND_HEALTHCHECK if name.startswith(hc_prefix) else KIND_KHCHECK
    return "shared"


def owner_counter(hc_prefix: str) -> AuditCounter:
    """An audit counter of requests by `<owner> <verb resource[/subresource]>` (owner: request_owner)."""
    def count(path: Path, offset: int, t0: float, t1: float, agent_prefix: str) -> Counter[str]:
        return Counter(f"{request_owner(e, hc_prefix)} {request_kind(e)}"
                       for e in audit_requests(path, offset, t0, t1, agent_prefix))
    return count


def audit_answers(path: Path, offset: int, t0: float, t1: float, agent_prefix: str) -> Counter[str]:
    """audit_requests() answered outside 2xx, by `verb resource[/subresource] code`."""
    counts: Counter[str] = Counter()
    for e in audit_requests(path, offset, t0, t1, agent_prefix):
        code = int((e.get("responseStatus") or {}).get("code") or 0)
        if not 200 <= code < 300:
            counts[f"{request_kind(e)} {code}"] += 1
    return counts


def audit_mark(log: Path) -> tuple[int, int]:
    """Where the audit log is now: (inode, size)."""
    try:
        st = log.stat()
    except OSError:
        return (0, 0)
    return (st.st_ino, st.st_size)


def audit_since(count: AuditCounter, log: Path, mark: tuple[int, int], t0: float, t1: float,
                agent_prefix: str) -> Counter[str]:
    """count() over the audit log since `mark`, across the API server's rotations (at 100 MB the log is
    renamed audit-<time>.log, keeping its inode, and a new audit.log begins)."""
    total: Counter[str] = Counter()
    for path in [*sorted(log.parent.glob(f"{log.stem}-*{log.suffix}")), log]:
        try:
            st = path.stat()
        except OSError:
            continue
        if st.st_ino == mark[0]:
            total += count(path, mark[1], t0, t1, agent_prefix)
        elif st.st_mtime >= t0:  # begun (or rotated away) after the mark
            total += count(path, 0, t0, t1, agent_prefix)
    return total
