"""Forged bearer tokens, as an attacker who can read pods but not their token files makes them: JWT-shaped,
with the claims of a projected checker pod token (audience `kuberhealthy`, a live expiry, a pod's name and
UID), and a signature of random bytes. The API server's TokenReview refuses every one; the daemon should
refuse most of them before asking it (kuberhealthy/web/report/tokens.py). Used by tests and `make attack`."""
from __future__ import annotations

import base64
import json
import os
import time
import uuid

TOKEN_AUDIENCE = "kuberhealthy"  # the checker pods' projected token audience (the test bed imports no product code)
HEADER = {"alg": "RS256", "kid": "forged"}


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forged_token(namespace: str, pod: str | None = None, uid: str | None = None, *, lifetime: float = 600.0) -> str:
    """A token naming pod `namespace/pod` with `uid` (made-up ones when None), signed with random bytes."""
    now = int(time.time())
    name, pod_uid = pod or f"made-up-{uuid.uuid4().hex[:10]}", uid or str(uuid.uuid4())
    claims = {"aud": [TOKEN_AUDIENCE], "exp": now + int(lifetime), "iat": now, "nbf": now,
              "iss": "https://kubernetes.default.svc", "sub": f"system:serviceaccount:{namespace}:default",
              "kubernetes.io": {"namespace": namespace,
                                "pod": {"name": name, "uid": pod_uid},
                                "serviceaccount": {"name": "default", "uid": str(uuid.uuid4())}}}
    parts = [json.dumps(HEADER).encode(), json.dumps(claims).encode(), os.urandom(256)]
    return ".".join(_b64url(p) for p in parts)
