"""The host's NVIDIA driver inside a sandbox whose image is not the host's (issue 26, item 2), as the NVIDIA
container toolkit does: the driver's user-space libraries (``libcuda``, ``libnvidia-ml`` …) and its tools
(``nvidia-smi`` …) must be the very version of the host's kernel module, so an image never ships them: the
platform binds the host's files read-only into every sandbox of a registered image that is given GPUs, under
``/run/nvidia/driver`` (the NVIDIA GPU operator's driver root; ``/run`` is the sandbox's own, never the
image's), and puts ``lib`` first on ``LD_LIBRARY_PATH`` and ``bin`` on ``PATH``. The ``host`` image needs
none of this: it is the host's ``/usr``.

Found once at start-up (``discover``): each library ``ldconfig -p`` lists for this machine's architecture
whose name is one of the driver's, bound under its own name (``libcuda.so.1``; the file it points to), and
each tool on the platform's safe ``PATH``. A host without the driver finds nothing and binds nothing.
Pure but for ``discover``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from danlu.backend import RunSpec
from danlu.compute.sandbox.helpers import SAFE_PATH, helper

ROOT = "/run/nvidia/driver"
# what nvidia-container-cli lists as the driver's compute and utility libraries (not graphics or video)
LIBRARIES = (
    "libcuda.so", "libcudadebugger.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so", "libnvidia-nvvm.so",
    "libnvidia-allocator.so", "libnvidia-cfg.so", "libnvidia-gpucomp.so", "libnvidia-opencl.so",
    "libnvidia-compiler.so", "libnvidia-fatbinaryloader.so", "libnvidia-pkcs11.so", "libnvidia-pkcs11-openssl3.so",
)  # fmt: skip
TOOLS = ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server")
ARCH = {"x86_64": "x86-64", "aarch64": "AArch64"}


def parse_ldconfig(listing: str, machine: str) -> list[tuple[str, str]]:
    """(host path, name in the sandbox) of each driver library in ``ldconfig -p`` output, for ``machine``
    (``uname -m``). A name listed twice (two folders) is bound from the first, as the loader would take it."""
    arch = ARCH.get(machine, machine)
    out: dict[str, str] = {}
    for line in listing.splitlines():
        name, sep, rest = line.strip().partition(" (")
        if not sep or " => " not in rest:
            continue
        flags, _, path = rest.partition(") => ")
        if arch not in flags.split(",") or not any(name == lib or name.startswith(lib + ".") for lib in LIBRARIES):
            continue
        out.setdefault(name, path.strip())
    return [(path, f"{ROOT}/lib/{name}") for name, path in sorted(out.items())]


def discover() -> tuple[tuple[str, str], ...]:
    """This host's driver files and where a sandbox sees them; none where the driver is not installed."""
    ldconfig = helper("ldconfig")
    if ldconfig is None:
        return ()
    r = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, env={"PATH": SAFE_PATH}, check=False)
    found = [(os.path.realpath(p), dest) for p, dest in parse_ldconfig(r.stdout, os.uname().machine)]
    found += [(os.path.realpath(p), f"{ROOT}/bin/{t}") for t in TOOLS if (p := helper(t)) is not None]
    return tuple((p, dest) for p, dest in found if Path(p).is_file())


def applies(spec: RunSpec) -> bool:
    """A run binds the driver: its image is not the host's and it was given GPUs."""
    return spec.image.kind != "host" and bool(spec.devices)


def environment(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the driver's folders: its libraries ahead of anything the image or the renter names (they
    must match the host's kernel module), its tools after the image's."""
    lib = f"{ROOT}/lib"
    out = dict(env)
    out["LD_LIBRARY_PATH"] = f"{lib}:{env['LD_LIBRARY_PATH']}" if env.get("LD_LIBRARY_PATH") else lib
    out["PATH"] = f"{env.get('PATH', '')}:{ROOT}/bin".lstrip(":")
    return out
