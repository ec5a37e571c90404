"""The token path of a report: a projected ServiceAccount token (audience `kuberhealthy`) names its pod.

Every checker container has one mounted read-only (checkpod.py; path in env KH_REPORT_TOKEN_FILE).
A report that sends it as `Authorization: Bearer <token>` is identified as the token's bound pod
(name and UID), from any address, through any proxy. The API server verifies it (TokenReview, with
our audience): a token of another audience, an expired one, or one whose pod is gone fails. At most
one review per run: a verified token is remembered (by its SHA-256, never the token itself) until
it would expire or for CACHE_SECONDS, whichever is first; a failed one briefly too (FAILED_SECONDS).

A bearer token costs nothing before it is worth a review, because anyone can send one
(docs/interface.md#under-hostile-clients):
  * the pre-screen (Screen, free): a projected token is a JWT whose payload names its audience, its
    expiry and its pod. The payload is read WITHOUT checking the signature — it only decides whether
    a review is worth asking for, never who the caller is. Not a JWT, a payload that is not JSON, not
    our audience, expired (beyond SKEW), or bound to no pod → 401 at once. A pod the pod cache does
    not hold → 400 (what a valid token of a pod that is no checker pod gets after its review), and a
    pod whose UID differs → 401; those two only while that pod cannot be too new for the cache
    (Triage.may_be_new: the caches are current and no run just started names it): else the review
    decides, as a genuine pod the cache has not seen yet must not lose its report;
  * the reviews: at most AT_ONCE in flight for the process, one per token digest (concurrent reports
    with one token share its review); past the bound → ReviewsBusy (503 + Retry-After, never 401: a
    genuine token may be among them). The admission asks before it takes a report slot (admission.py), so a
    report waiting for a review holds none.
A remembered token skips the pre-screen. Pre-screen refusals are not remembered: they cost nothing
to repeat, and a flood of them must not push verified tokens out of the table.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kuberhealthy.base.errors import ApiError, is_transient
from kuberhealthy.kube import TOKENREVIEWS, Api, Cache, Obj
from kuberhealthy.records.checkpod import TOKEN_AUDIENCE as AUDIENCE

POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"
POD_UID_EXTRA = "authentication.kubernetes.io/pod-uid"
SA_PREFIX = "system:serviceaccount:"
CACHE_SECONDS = 60.0
FAILED_SECONDS = 10.0
MAX_CACHED = 20000
AT_ONCE = 4  # TokenReviews in flight at once, for the process
SKEW = 60.0  # seconds of clock skew an expiry is given before the pre-screen calls it past
CLAIMS = "kubernetes.io"  # the payload's claim naming the namespace and the bound pod
NOT_BOUND = "the token is not bound to a pod"
_B64URL = re.compile(r"[A-Za-z0-9_-]+")


class InvalidToken(Exception):
    """The token is not a valid kuberhealthy-audience pod token: 401; str(e) is the reason."""


class ForeignPod(Exception):
    """The token names a pod that is no checker pod we know: 400 (stats.TOKEN_OTHER_POD); str(e) says so."""


class TokenNotYetVerified(Exception):
    """The API server cannot verify it right now: 503."""


class ReviewsBusy(TokenNotYetVerified):
    """AT_ONCE reviews are in flight already: 503 + Retry-After at once, holding nothing."""


@dataclass(frozen=True)
class PodIdentity:
    namespace: str
    name: str
    uid: str


def bearer(header: str) -> str | None:
    """The token of an `Authorization: Bearer <token>` header; None when there is no such header."""
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip()


def not_a_checker_pod(namespace: str, name: str) -> str:
    return f"the token's pod {namespace}/{name} is not a checker pod that may report"


def identity_of(review: Obj) -> PodIdentity:
    """The pod a TokenReview's answer names, or InvalidToken with why not."""
    status = review.get("status") or {}
    if not status.get("authenticated"):
        raise InvalidToken(f"the token is not valid: {status.get('error') or 'not authenticated'}")
    if AUDIENCE not in (status.get("audiences") or []):
        raise InvalidToken(f"the token is not for audience {AUDIENCE}")
    user = status.get("user") or {}
    username = str(user.get("username") or "")
    extra = user.get("extra") or {}
    names, uids = extra.get(POD_NAME_EXTRA) or [], extra.get(POD_UID_EXTRA) or []
    if not username.startswith(SA_PREFIX) or not names or not uids:
        raise InvalidToken(NOT_BOUND)
    namespace = username[len(SA_PREFIX):].split(":", 1)[0]
    return PodIdentity(namespace=namespace, name=str(names[0]), uid=str(uids[0]))


def unverified_claims(token: str) -> dict[str, Any]:
    """The payload of a JWT, decoded but NOT verified; InvalidToken when it is no JWT with a JSON payload."""
    parts = token.split(".")
    if len(parts) != 3 or not all(_B64URL.fullmatch(p) for p in parts):
        raise InvalidToken("the token is not valid: it is not a JWT (three base64url parts)")
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, binascii.Error, RecursionError):
        payload = None
    if not isinstance(payload, dict):
        raise InvalidToken("the token is not valid: its payload is not a JSON object")
    return payload


def claimed_pod(claims: dict[str, Any], now: float, skew: float = SKEW) -> PodIdentity:
    """The pod an unverified payload names, once it passes the rules that need no cache (audience,
    expiry against the wall clock `now`, a bound pod); InvalidToken with why not."""
    aud = claims.get("aud")
    if AUDIENCE not in ([aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []):
        raise InvalidToken(f"the token is not valid: it is not for audience {AUDIENCE}")
    exp = claims.get("exp")
    if not isinstance(exp, (int, float)) or isinstance(exp, bool):
        raise InvalidToken("the token is not valid: it carries no expiry")
    if exp + skew < now:
        raise InvalidToken(f"the token is not valid: it expired {now - exp:.0f} s ago")
    bound = claims.get(CLAIMS)
    pod = bound.get("pod") if isinstance(bound, dict) else None
    names = [bound.get("namespace") if isinstance(bound, dict) else None,
             *((pod.get("name"), pod.get("uid")) if isinstance(pod, dict) else (None, None))]
    if not all(isinstance(n, str) and n for n in names):
        raise InvalidToken(NOT_BOUND)
    return PodIdentity(namespace=str(names[0]), name=str(names[1]), uid=str(names[2]))


class Screen:
    """The free pre-screen (module docstring): `pods` the checker pod cache, `may_be_new(namespace, name)`
    whether that pod may exist unseen by it (Triage.may_be_new), `wall` the clock expiries are read against."""

    def __init__(self, pods: Cache, may_be_new: Callable[[str, str], bool], wall: Callable[[], float] = time.time,
                 skew: float = SKEW) -> None:
        self._pods = pods
        self._may_be_new = may_be_new
        self._wall = wall
        self._skew = skew

    def __call__(self, token: str) -> None:
        """Returns when a review is worth asking for; else InvalidToken (401) or ForeignPod (400)."""
        who = claimed_pod(unverified_claims(token), self._wall(), self._skew)
        if self._may_be_new(who.namespace, who.name):
            return
        pod = self._pods.get(who.namespace, who.name)
        if pod is None:
            raise ForeignPod(not_a_checker_pod(who.namespace, who.name))
        if (pod.get("metadata") or {}).get("uid") != who.uid:
            raise InvalidToken(f"the token is not valid: its pod {who.namespace}/{who.name} is gone")


@dataclass
class _Flight:
    """One review under way; reports with the same token wait for its outcome."""
    done: threading.Event = field(default_factory=threading.Event)
    outcome: PodIdentity | Exception | None = None


class TokenVerifier:
    """Verifies bearer tokens by TokenReview (module docstring); `screen` (None: none) before a review."""

    def __init__(self, api: Api, clock: Callable[[], float] = time.monotonic, *,
                 screen: Callable[[str], None] | None = None, at_once: int = AT_ONCE) -> None:
        self._api = api
        self._clock = clock
        self._screen = screen
        self._at_once = threading.BoundedSemaphore(at_once)
        self._lock = threading.Lock()
        self._known: OrderedDict[str, tuple[float, PodIdentity | str]] = OrderedDict()  # digest -> (until, id|why)
        self._flights: dict[str, _Flight] = {}  # digest -> its review under way (at most at_once)
        self.reviews = 0  # TokenReviews sent (for tests and figures)
        self.screened = 0  # tokens refused by the pre-screen
        self.shared = 0  # reports served by another report's review of the same token
        self.busy = 0  # reports answered ReviewsBusy

    def verify(self, token: str, timeout: float) -> PodIdentity:
        """The token's pod; InvalidToken, ForeignPod, TokenNotYetVerified or ReviewsBusy with why not."""
        if not token:
            raise InvalidToken("the Authorization header carries no token")
        digest = hashlib.sha256(token.encode()).hexdigest()
        with self._lock:
            flight = self._joined(digest)
        if flight is None and self._screen is not None:
            try:
                self._screen(token)
            except (InvalidToken, ForeignPod):
                with self._lock:
                    self.screened += 1
                raise
        if flight is None:
            with self._lock:
                flight = self._joined(digest)
                mine = flight is None
                if flight is None:
                    if not self._at_once.acquire(blocking=False):
                        self.busy += 1
                        raise ReviewsBusy("too many tokens are being reviewed; try again shortly")
                    flight = self._flights[digest] = _Flight()
            if mine:
                return self._review(token, digest, flight, timeout)
        if not flight.done.wait(max(0.0, timeout)):
            raise TokenNotYetVerified("cannot verify the token right now: its review is taking too long")
        outcome = flight.outcome
        if isinstance(outcome, PodIdentity):
            return outcome
        if isinstance(outcome, Exception):
            raise type(outcome)(str(outcome))  # a fresh one: raising one instance in many threads shares its traceback
        raise TokenNotYetVerified("cannot verify the token right now")

    def _joined(self, digest: str) -> _Flight | None:
        """Under the lock: a finished flight for a remembered token, the review under way, or None (no
        review yet: this caller makes it)."""
        known = self._known.get(digest)
        if known is not None and known[0] > self._clock():
            done = _Flight(outcome=known[1] if isinstance(known[1], PodIdentity) else InvalidToken(known[1]))
            done.done.set()
            return done
        flight = self._flights.get(digest)
        if flight is not None:
            self.shared += 1
        return flight

    def _review(self, token: str, digest: str, flight: _Flight, timeout: float) -> PodIdentity:
        """One TokenReview (holding one of the AT_ONCE), its outcome remembered and handed to the flight."""
        try:
            flight.outcome = who = self._reviewed(token, digest, timeout)
            return who
        except (InvalidToken, TokenNotYetVerified) as e:
            flight.outcome = e
            raise
        finally:
            with self._lock:
                self._flights.pop(digest, None)
            self._at_once.release()
            flight.done.set()

    def _reviewed(self, token: str, digest: str, timeout: float) -> PodIdentity:
        now = self._clock()
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": {"token": token, "audiences": [AUDIENCE]}}
        with self._lock:
            self.reviews += 1
        try:
            review = self._api.create(TOKENREVIEWS, "", body, timeout=max(0.1, timeout))
        except ApiError as e:
            if is_transient(e):
                raise TokenNotYetVerified(f"cannot verify the token right now: {e}") from e
            raise TokenNotYetVerified(f"cannot verify the token: {e}") from e
        try:
            who = identity_of(review)
        except InvalidToken as e:
            self._remember(digest, now + FAILED_SECONDS, str(e))
            raise
        self._remember(digest, now + CACHE_SECONDS, who)
        return who

    def _remember(self, digest: str, until: float, value: PodIdentity | str) -> None:
        with self._lock:
            self._known.pop(digest, None)
            self._known[digest] = (until, value)
            while len(self._known) > MAX_CACHED:
                self._known.popitem(last=False)
