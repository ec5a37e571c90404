"""Projected ServiceAccount tokens, minted for simulated pods the way a kubelet mints them.

A pod whose spec has a projected volume with a `serviceAccountToken` source, mounted in its checker
container, gets a token from the TokenRequest API (`POST .../serviceaccounts/<sa>/token`, bound to the
pod by name and UID, with the source's audience and expirationSeconds) once it is bound, before its
containers start. The ServiceAccount is created when missing: the test bed runs no controller-manager
that would make "default". The token is written to a file of the pod's own under the kubelet's token
directory, and env values that name a path inside that mount (KH_REPORT_TOKEN_FILE) are mapped to it,
as `status.podIP` fieldRefs are mapped to the simulated address.

The misbehaving tokens a checker may send (SIM_TOKEN, behaviours.py) are made here too: one of the
wrong audience (a real TokenRequest for the API server's own audience), and an expired one — the
claims of a real token moved into the past and signed again with the cluster's ServiceAccount signing
key (the TokenRequest API refuses lifetimes under ten minutes; the key is the test bed's, handed to
the kubelet). Signing uses the openssl binary the test bed already needs, so no JWT library is
required.

Not simulated: rotation (a kubelet refreshes the file at 80% of its lifetime; test pods live minutes),
other projected sources (ConfigMaps, Secrets, downward API), `mode` and ownership of the files. A token
that cannot be minted (the pod names a different ServiceAccount than it runs as, RBAC, ...) is an
error in the pod's record; the pod still runs, without the file.
"""
from __future__ import annotations

import base64
import json
import logging
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.cluster.builders import TOKEN_FILE_ENV
from testbed.sim.behaviours import (
    TOKEN_EXPIRED,
    TOKEN_FILE,
    TOKEN_GARBAGE,
    TOKEN_NONE,
    TOKEN_WRONG_AUDIENCE,
    checker_container,
)
from testbed.sim.rawapi import RawApi, SimApiError

logger = logging.getLogger(__name__)

DEFAULT_SECONDS = 3600  # a projection without expirationSeconds gets an hour, as the API defaults it


@dataclass(frozen=True)
class Projection:
    """One serviceAccountToken source of a projected volume mounted in the checker container."""

    volume: str
    mount_path: str  # the volume's mountPath in the container
    path: str  # the file's path inside the volume
    audience: str  # "" = the API server's own audience
    seconds: int

    @property
    def container_path(self) -> str:
        return f"{self.mount_path.rstrip('/')}/{self.path.lstrip('/')}"


def projections(pod: Mapping[str, Any]) -> list[Projection]:
    """The token projections of the pod's checker container (the one the behaviours run as)."""
    spec = pod.get("spec") or {}
    volumes = {str(v.get("name")): v for v in spec.get("volumes") or [] if v.get("projected")}
    found: list[Projection] = []
    for mount in checker_container(pod).get("volumeMounts") or []:
        volume = volumes.get(str(mount.get("name")))
        if volume is None:
            continue
        for source in (volume.get("projected") or {}).get("sources") or []:
            token = source.get("serviceAccountToken")
            if token and token.get("path"):
                found.append(Projection(volume=str(volume["name"]), mount_path=str(mount.get("mountPath") or "/"),
                                        path=str(token["path"]), audience=str(token.get("audience") or ""),
                                        seconds=int(token.get("expirationSeconds") or DEFAULT_SECONDS)))
    return found


def service_account(pod: Mapping[str, Any]) -> str:
    spec = pod.get("spec") or {}
    return str(spec.get("serviceAccountName") or spec.get("serviceAccount") or "default")


def map_paths(env: Mapping[str, str], files: Mapping[str, str], mounts: Mapping[str, str]) -> dict[str, str]:
    """env with every value that names a minted file (or a path under a token mount) mapped to the
    kubelet's own copy: `files` container path -> host path, `mounts` container dir -> host dir."""
    out = dict(env)
    for name, value in env.items():
        if value in files:
            out[name] = files[value]
            continue
        for inside, outside in mounts.items():
            if value.startswith(inside.rstrip("/") + "/"):
                out[name] = outside + value[len(inside.rstrip("/")):]
                break
    return out


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def expired_copy(token: str, signing_key: Path, ago: float = 3600.0) -> str:
    """`token` (a JWT the API server minted) with its lifetime moved `ago` seconds into the past,
    signed again (RS256) with the cluster's ServiceAccount signing key: valid but for its expiry."""
    header, payload, _ = token.split(".")
    claims = json.loads(_unb64url(payload))
    lifetime = int(claims.get("exp", 0)) - int(claims.get("iat", 0)) or 600
    exp = int(time.time() - ago)
    claims.update({"exp": exp, "iat": exp - lifetime, "nbf": exp - lifetime})
    signed = f"{header}.{_b64url(json.dumps(claims, separators=(',', ':')).encode())}"
    signature = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(signing_key)], input=signed.encode(),
                               capture_output=True, check=True).stdout
    return f"{signed}.{_b64url(signature)}"


class TokenMinter:
    """Mints and stores the pods' tokens; one per kubelet, shared by its pod threads. close() removes
    every file."""

    def __init__(self, api: RawApi, signing_key: Path | None = None) -> None:
        self._api = api
        self.signing_key = signing_key
        self.root = Path(tempfile.mkdtemp(prefix="kh-sim-tokens-"))
        self._lock = threading.Lock()
        self._accounts: set[str] = set()  # ns/name of ServiceAccounts known to exist
        self.requests = 0  # TokenRequests sent (for tests)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def pod_dir(self, pod: Mapping[str, Any]) -> Path:
        meta = pod.get("metadata") or {}
        return self.root / f"{meta.get('namespace')}_{meta.get('name')}_{meta.get('uid')}"

    def forget(self, pod: Mapping[str, Any]) -> None:
        """The pod is gone (or its kubelet stops): remove its files, as a kubelet unmounts its volumes."""
        shutil.rmtree(self.pod_dir(pod), ignore_errors=True)

    def _ensure_account(self, cancel: threading.Event, namespace: str, name: str) -> None:
        key = f"{namespace}/{name}"
        with self._lock:
            if key in self._accounts:
                return
        body = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
        try:
            self._api.call_until(cancel, "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", body)
        except SimApiError as e:
            if e.status != 409:
                raise
        with self._lock:
            self._accounts.add(key)

    def mint(self, cancel: threading.Event, pod: Mapping[str, Any], audience: str, seconds: int) -> str | None:
        """A token bound to `pod` for `audience` ("" = the API server's); None when cancelled first.
        SimApiError when the API server refuses it."""
        meta = pod.get("metadata") or {}
        namespace, account = str(meta.get("namespace")), service_account(pod)
        self._ensure_account(cancel, namespace, account)
        spec: dict[str, Any] = {"expirationSeconds": seconds, "boundObjectRef": {
            "kind": "Pod", "apiVersion": "v1", "name": meta.get("name"), "uid": meta.get("uid")}}
        if audience:
            spec["audiences"] = [audience]
        with self._lock:
            self.requests += 1
        answer = self._api.call_until(cancel, "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
                                      {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec})
        return None if answer is None else str((answer.get("status") or {}).get("token") or "")

    def mount(self, cancel: threading.Event,
              pod: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str], list[str]]:
        """Mint every projection of the pod and write the files: (container path -> file, container mount
        dir -> pod's dir for that volume, errors)."""
        files: dict[str, str] = {}
        mounts: dict[str, str] = {}
        errors: list[str] = []
        for p in projections(pod):
            volume_dir = self.pod_dir(pod) / p.volume
            mounts[p.mount_path] = str(volume_dir)
            try:
                token = self.mint(cancel, pod, p.audience, p.seconds)
            except SimApiError as e:
                errors.append(f"token for volume {p.volume}: {e}")
                logger.warning("cannot mint the token of %s for volume %s: %s", meta_key(pod), p.volume, e)
                continue
            if token is None:
                break
            target = volume_dir / p.path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(token, encoding="utf-8")
            target.chmod(0o600)
            files[p.container_path] = str(target)
        return files, mounts, errors


def meta_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def report_bearer(mode: str, env: Mapping[str, str], minter: TokenMinter | None, cancel: threading.Event,
                  pod: Mapping[str, Any], errors: list[str]) -> str | None:
    """What SIM_TOKEN `mode` says a checker sends as its Bearer token (None: no Authorization header);
    why a bad token cannot be made goes to `errors` (the pod's record)."""
    if mode == TOKEN_NONE:
        return None
    if mode == TOKEN_GARBAGE:
        return f"kh-sim-garbage-{uuid.uuid4().hex}"
    path = env.get(TOKEN_FILE_ENV, "")
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as e:
        if mode != TOKEN_FILE:  # the others are made from the pod's own token
            errors.append(f"SIM_TOKEN={mode}: no token file ({e})")
        return None  # as checkclient.py: no readable file, no token
    if mode == TOKEN_FILE:
        return token
    if mode == TOKEN_WRONG_AUDIENCE and minter is not None:
        try:
            return minter.mint(cancel, pod, "", 600)
        except SimApiError as e:
            errors.append(f"SIM_TOKEN={mode}: {e}")
            return None
    if mode == TOKEN_EXPIRED and minter is not None and minter.signing_key is not None:
        return expired_copy(token, minter.signing_key)
    errors.append(f"SIM_TOKEN={mode} needs the kubelet's token minter (and signing key)")
    return None
