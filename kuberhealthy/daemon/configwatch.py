"""Re-reads the config file when its content changes (a ConfigMap update swaps the mounted file).

Checks the file's bytes every `interval` seconds; the standard library has no file-change events,
and a ConfigMap volume is updated by swapping a symlink, which content hashing sees reliably. A new
file that does not validate is logged and ignored: the running config stays.
"""
from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable

from kuberhealthy.base.config import Config, load
from kuberhealthy.base.errors import ConfigError
from kuberhealthy.base.threads import PeriodicThread

logger = logging.getLogger(__name__)


def _digest(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


class ConfigWatcher(PeriodicThread):
    def __init__(self, path: str, current: Config, on_change: Callable[[Config], None],
                 interval: float = 2.0) -> None:
        super().__init__("kh-config-watch", interval)
        self._path = path
        self._current = current
        self._on_change = on_change
        self._digest = _digest(path)

    def check_once(self) -> bool:
        """Reload if the file changed. Returns True when a new, different config was applied."""
        digest = _digest(self._path)
        if digest is None or digest == self._digest:
            return False
        self._digest = digest
        try:
            new = load(self._path)
        except ConfigError as e:
            logger.error("Config file %s changed but is invalid; keeping the running config: %s", self._path, e)
            return False
        if new == self._current:
            return False
        logger.info("Config file %s changed; applying it", self._path)
        self._current = new
        self._on_change(new)
        return True

    def tick(self) -> None:
        self.check_once()
