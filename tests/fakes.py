"""A recording executor for billing tests, where processes are beside the point. Real processes
are exercised by tests/compute and tests/api with the LocalExecutor."""

from __future__ import annotations

from pathlib import Path

from danlu.compute.executor import ExitInfo, LaunchSpec, ProcessRef


class RecordingExecutor:
    def __init__(self) -> None:
        self.launched: list[LaunchSpec] = []
        self.alive_pids: set[int] = set()
        self.exits: dict[Path, ExitInfo] = {}
        self.signals: list[tuple[int, int]] = []
        self._next = 100_000

    def launch(self, spec: LaunchSpec) -> ProcessRef:
        self._next += 1
        self.launched.append(spec)
        self.alive_pids.add(self._next)
        return ProcessRef(self._next, 1)

    def alive(self, ref: ProcessRef) -> bool:
        return ref.pid in self.alive_pids

    def exit_info(self, run_dir: Path) -> ExitInfo | None:
        return self.exits.get(run_dir)

    def signal_group(self, ref: ProcessRef, sig: int) -> None:
        self.signals.append((ref.pid, sig))

    def die(self, pid: int, run_dir: Path | None = None, code: int | None = None, at_ms: int = 0) -> None:
        self.alive_pids.discard(pid)
        if run_dir is not None and code is not None:
            self.exits[run_dir] = ExitInfo(code, at_ms)
