"""Network bytes of a sandbox, where the sandbox can count them (docs/telemetry.md "Sampling").

A run with its own network namespace (the ``none`` and ``outbound`` policies) has interfaces of its
own: the bytes received and sent on them (loopback excluded) are its traffic, read from
``/proc/PID/net/dev`` of any process inside. A run on the host's network (``host``, or
``--no-sandbox``) shares the host's interfaces: its traffic cannot be told apart, and is not counted.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping


def parse_net_dev(text: str) -> tuple[int, int]:
    """(received, sent) bytes over every interface but loopback, from ``/proc/net/dev``."""
    rx = tx = 0
    for line in text.splitlines()[2:]:
        name, _, rest = line.partition(":")
        fields = rest.split()
        if name.strip() == "lo" or len(fields) < 9:
            continue
        rx += int(fields[0])
        tx += int(fields[8])
    return rx, tx


def _netns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


class NetCounter:
    """Finds, once per run, a process inside the run's own network namespace (a descendant of its
    supervisor), and reads that namespace's counters at each sample."""

    def __init__(self) -> None:
        self._own = _netns(os.getpid())
        self._inside: dict[str, tuple[int, str]] = {}  # run id -> (pid in its namespace, namespace)

    def _find(self, root: int, children: Mapping[int, Iterable[int]]) -> tuple[int, str] | None:
        stack, seen = [root], set()
        while stack:
            pid = stack.pop()
            if pid in seen:
                continue
            seen.add(pid)
            ns = _netns(pid)
            if ns is not None and ns != self._own:
                return pid, ns
            stack.extend(children.get(pid, ()))
        return None

    def read(self, run_id: str, root: int, children: Mapping[int, Iterable[int]] | None) -> tuple[int, int] | None:
        """(received, sent) bytes of the run's namespace so far, or None (the host's network, or gone).
        ``children`` (ppid → pids) is needed only the first time a run is read."""
        known = self._inside.get(run_id)
        if known is None or _netns(known[0]) != known[1]:
            if children is None:
                return None
            found = self._find(root, children)
            if found is None:
                return None
            self._inside[run_id] = known = found
        try:
            with open(f"/proc/{known[0]}/net/dev") as f:
                return parse_net_dev(f.read())
        except OSError:
            self._inside.pop(run_id, None)
            return None

    def forget(self, alive: Iterable[str]) -> None:
        keep = set(alive)
        for run_id in set(self._inside) - keep:
            del self._inside[run_id]
