"""Watches checker pods from outside the product and records how many were live at once, per check."""
from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any

from kubernetes import client, config, watch

from testbed.cluster.builders import APP_SELECTOR, CHECK_LABEL, RUN_ID_LABEL


class LivePodMonitor:
    """Max number of simultaneously live (Pending/Running, not deleting) checker pods per check."""

    def __init__(self, kubeconfig: str, namespace: str) -> None:
        self._api = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))
        self._ns = namespace
        self._live: dict[str, set[str]] = defaultdict(set)
        self.max_live: dict[str, int] = defaultdict(int)
        self.creators: list[tuple[str, str]] = []  # (pod name, run uuid) in creation order
        self._stop = threading.Event()
        self._watch = watch.Watch()
        self._thread = threading.Thread(target=self._run, name="test-pod-monitor", daemon=True)

    def start(self) -> LivePodMonitor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._watch.stop()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for ev in self._watch.stream(self._api.list_namespaced_pod, self._ns, timeout_seconds=2,
                                             label_selector=APP_SELECTOR):
                    self._apply(ev["type"], ev["object"])
            except Exception:  # noqa: BLE001 - the monitor reconnects
                self._stop.wait(0.2)

    def _apply(self, etype: str, pod: Any) -> None:
        check = (pod.metadata.labels or {}).get(CHECK_LABEL, "?")
        name = pod.metadata.name
        live = (etype != "DELETED" and pod.metadata.deletion_timestamp is None
                and (pod.status.phase or "Pending") in ("Pending", "Running"))
        if etype == "ADDED":
            self.creators.append((name, (pod.metadata.labels or {}).get(RUN_ID_LABEL, "")))
        if live:
            self._live[check].add(name)
        else:
            self._live[check].discard(name)
        self.max_live[check] = max(self.max_live[check], len(self._live[check]))
