"""Python's cyclic garbage collector, set for a daemon whose heap is mostly long-lived objects.

The worker holds the imported libraries (the official client alone brings a thousand model classes) and
the watch caches (a khstate of a month-old check is some thousands of objects), and every watch event
and request makes short-lived ones. With the interpreter's defaults (700, 10, 10) a young collection
runs every 700 allocations and a full one walks every long-lived object again and again: measured over
the web app's caches of 1,000 checks (250 of them changing between /metrics scrapes), a quarter of the
wall time went to collections, a full one taking about a quarter of a second of the GIL.

So, in the worker before the daemon starts: what start-up made is collected once and frozen (moved
where collections never look again; it is freed by reference counting as ever), and collections run
ten times less often. Garbage in cycles still goes at the next middle-generation collection, about
every 140,000 allocations.
"""
from __future__ import annotations

import gc
import logging

logger = logging.getLogger(__name__)

THRESHOLDS = (7000, 20, 20)  # allocations before a young collection; young ones before a middle one; ...


def settle() -> None:
    """Collect and freeze what start-up made; set the thresholds."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    logger.debug("Garbage collector: %d start-up objects frozen, thresholds %s", gc.get_freeze_count(), THRESHOLDS)
