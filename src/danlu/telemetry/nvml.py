"""Real GPUs' live readings through NVML (``nvidia-ml-py``), by UUID. Without a driver there are
no readings (every GPU here is then simulated, and the sampler derives their utilisation)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GpuReading:
    util_pct: int
    mem_mb: int
    power_mw: int | None
    temp_c: int | None


class Nvml:
    """A lazily initialised NVML session; ``read`` answers None for a GPU it cannot read."""

    def __init__(self) -> None:
        self._nvml: Any = None
        self._failed = False
        self._handles: dict[str, Any] = {}

    def _lib(self) -> Any:
        if self._nvml is None and not self._failed:
            try:
                import pynvml

                pynvml.nvmlInit()
                self._nvml = pynvml
            except Exception as exc:  # no driver, no library: no real readings
                log.info("NVML unavailable for telemetry: %s", exc)
                self._failed = True
        return self._nvml

    def read(self, uuid: str) -> GpuReading | None:
        nv = self._lib()
        if nv is None:
            return None
        try:
            handle = self._handles.get(uuid)
            if handle is None:
                handle = self._handles[uuid] = nv.nvmlDeviceGetHandleByUUID(uuid)
            util = nv.nvmlDeviceGetUtilizationRates(handle)
            mem = nv.nvmlDeviceGetMemoryInfo(handle)
            power = temp = None
            try:
                power = int(nv.nvmlDeviceGetPowerUsage(handle))
            except nv.NVMLError:
                pass
            try:
                temp = int(nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU))
            except nv.NVMLError:
                pass
            return GpuReading(int(util.gpu), int(mem.used) >> 20, power, temp)
        except Exception as exc:
            log.warning("NVML could not read GPU %s: %s", uuid, exc)
            self._handles.pop(uuid, None)
            return None
