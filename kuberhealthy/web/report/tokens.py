"""The token path of a report: a projected ServiceAccount token (audience `kuberhealthy`) names its pod.

Every checker container has one mounted read-only (checkpod.py; path in env KH_REPORT_TOKEN_FILE).
A report that sends it as `Authorization: Bearer <token>` is identified as the token's bound pod
(name and UID), from any address, through any proxy. The API server verifies it (TokenReview, with
our audience): a token of another audience, an expired one, or one whose pod is gone fails. At most
one review per run: a verified token is remembered (by its SHA-256, never the token itself) until
it would expire or for CACHE_SECONDS, whichever is first; a failed one briefly too, so a flood of
bad tokens costs the API server one review per token per FAILED_SECONDS.
"""
from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from kuberhealthy.base.errors import ApiError, is_transient
from kuberhealthy.kube import TOKENREVIEWS, Api, Obj
from kuberhealthy.records.checkpod import TOKEN_AUDIENCE as AUDIENCE

POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"
POD_UID_EXTRA = "authentication.kubernetes.io/pod-uid"
SA_PREFIX = "system:serviceaccount:"
CACHE_SECONDS = 60.0
FAILED_SECONDS = 10.0
MAX_CACHED = 20000


class InvalidToken(Exception):
    """The token is not a valid kuberhealthy-audience pod token: 401; str(e) is the reason."""


class TokenNotYetVerified(Exception):
    """The API server cannot verify it right now: 503."""


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
        raise InvalidToken("the token is not bound to a pod")
    namespace = username[len(SA_PREFIX):].split(":", 1)[0]
    return PodIdentity(namespace=namespace, name=str(names[0]), uid=str(uids[0]))


class TokenVerifier:
    def __init__(self, api: Api, clock: Callable[[], float] = time.monotonic) -> None:
        self._api = api
        self._clock = clock
        self._lock = threading.Lock()
        self._known: OrderedDict[str, tuple[float, PodIdentity | str]] = OrderedDict()  # digest -> (until, id|why)
        self.reviews = 0  # TokenReviews sent (for tests and figures)

    def verify(self, token: str, timeout: float) -> PodIdentity:
        if not token:
            raise InvalidToken("the Authorization header carries no token")
        digest = hashlib.sha256(token.encode()).hexdigest()
        now = self._clock()
        with self._lock:
            known = self._known.get(digest)
            if known is not None and known[0] > now:
                if isinstance(known[1], PodIdentity):
                    return known[1]
                raise InvalidToken(known[1])
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": {"token": token, "audiences": [AUDIENCE]}}
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
