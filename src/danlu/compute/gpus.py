"""GPU discovery: NVML through nvidia-ml-py for real GPUs, or a declared simulated spec.

Simulated GPUs are always marked ``simulated`` in storage and in every listing, so a renter is
never shown a simulated GPU as if it were real.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from danlu.catalog.gpu_models import model_for_nvml_name, resolve_model
from danlu.core.errors import InvalidInput

log = logging.getLogger(__name__)

DEFAULT_SIMULATED_SPEC = "A100-80GB:2,T4:2"


@dataclass(frozen=True)
class DiscoveredGpu:
    index: int
    uuid: str
    model: str
    nvml_name: str
    vram_mb: int
    simulated: bool
    minor: int | None = None  # /dev/nvidiaN's N (NVML's minor number); a simulated GPU's index
    host: str | None = None  # the host it is on (None: this machine; a Slurm node's name)


def parse_simulated_spec(spec: str, host_name: str) -> list[DiscoveredGpu]:
    """``"A100-80GB:2,T4:2"`` → four simulated GPUs with indices 0..3 on ``host_name``."""
    gpus: list[DiscoveredGpu] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        name, _, count_text = part.partition(":")
        model = resolve_model(name)
        try:
            count = int(count_text) if count_text else 1
        except ValueError:
            raise InvalidInput(
                "invalid_gpu_spec", f"bad count in {part!r}; write MODEL:COUNT, e.g. {DEFAULT_SIMULATED_SPEC}"
            ) from None
        if count <= 0 or count > 64:
            raise InvalidInput("invalid_gpu_spec", f"count in {part!r} must be between 1 and 64")
        for _ in range(count):
            i = len(gpus)
            gpus.append(
                DiscoveredGpu(
                    index=i,
                    uuid=f"SIM-{host_name}-{i}-{model.name}",
                    model=model.name,
                    nvml_name=f"simulated {model.name}",
                    vram_mb=model.vram_gb * 1024,
                    simulated=True,
                    minor=i,
                )
            )
    if not gpus:
        raise InvalidInput("invalid_gpu_spec", f"no GPUs in spec {spec!r}; e.g. {DEFAULT_SIMULATED_SPEC}")
    return gpus


def discover_nvml() -> list[DiscoveredGpu] | None:
    """Real GPUs through NVML, or None when NVML or its driver is absent (no GPU machine)."""
    try:
        import pynvml
    except ImportError:  # nvidia-ml-py is a dependency; only a broken install lands here
        log.warning("nvidia-ml-py is not importable; cannot discover GPUs")
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        log.info("NVML unavailable (%s); no real GPUs on this machine", exc)
        return None
    try:
        out: list[DiscoveredGpu] = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else str(name)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            model = model_for_nvml_name(name)
            try:
                minor: int | None = int(pynvml.nvmlDeviceGetMinorNumber(handle))
            except pynvml.NVMLError:
                minor = None
            out.append(
                DiscoveredGpu(
                    index=i,
                    uuid=uuid,
                    model=model.name if model else name.replace("NVIDIA ", "").replace(" ", "-"),
                    nvml_name=name,
                    vram_mb=int(mem.total) // (1024 * 1024),
                    simulated=False,
                    minor=minor,
                )
            )
        return out
    finally:
        pynvml.nvmlShutdown()
