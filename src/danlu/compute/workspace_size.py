"""How many bytes a workspace keeps: a walk of its regular files (``fstree.scan``, not following links),
and a running rental's estimate for what staying stopped would cost per day (``views.show``)."""

from __future__ import annotations

import logging
import os
import stat
import threading

from danlu.compute import fstree
from danlu.context import Platform

log = logging.getLogger(__name__)


def workspace_bytes(path: str) -> int:
    """Bytes kept in a workspace (regular files, not following links, at any depth: ``fstree.scan``)."""
    return _measure(path)[0]


def _measure(path: str) -> tuple[int, int]:
    """(bytes of its regular files, entries walked)."""
    total = entries = 0

    def add(_name: str, st: os.stat_result) -> bool:
        nonlocal total, entries
        entries += 1
        if stat.S_ISREG(st.st_mode):
            total += st.st_size
        return True

    try:
        fstree.scan(path, add)
    except fstree.TreeChanged:  # only a running process moves folders; a stopped workspace is still
        log.warning("the workspace %s changed while it was measured", path)
    return total, entries


# A running (or not yet measured) workspace's size, for what staying stopped would cost per day (an
# estimate: the bill comes from the storage pass's own measurement). ``show`` (every `danlu show`, every
# page of a rental) walked the whole workspace on every call: a renter's million files each time. A
# workspace of many entries is measured at most once in 30 s; a small one, cheap to walk, every time.
ESTIMATE_TTL_MS = 30_000
ESTIMATE_FROM_ENTRIES = 10_000
_ESTIMATES: dict[str, tuple[int, int]] = {}  # folder -> (bytes, measured at ms)
_ESTIMATES_LOCK = threading.Lock()


def estimated_bytes(p: Platform, folder: str) -> int:
    now = p.clock.now_ms()
    hit = _ESTIMATES.get(folder)
    if hit is not None and now - ESTIMATE_TTL_MS < hit[1] <= now:
        return hit[0]
    size, entries = _measure(folder)
    with _ESTIMATES_LOCK:
        if len(_ESTIMATES) >= 4096:
            _ESTIMATES.clear()
        if entries >= ESTIMATE_FROM_ENTRIES:
            _ESTIMATES[folder] = (size, now)
        else:
            _ESTIMATES.pop(folder, None)
    return size
