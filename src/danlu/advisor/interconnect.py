"""Interconnect term of the time model: the cost of moving gradients and parameters between GPUs (pure).

Data-parallel training moves, per optimizer step and per GPU, a ring all-reduce of the gradients:
2·(N−1)/N·Ψ bytes each way, Ψ = trainable parameters × gradient bytes (2 in mixed precision, as the
memory model keeps them; 4 in fp32). ZeRO-1 and ZeRO-2 move the same (reduce-scatter + all-gather);
ZeRO-3 / FSDP also gathers the parameters for the forward and again for the backward pass, 3·(N−1)/N·Ψ,
every micro-batch (ZeRO, Rajbhandari et al. 2020, §7.2). The bytes go through the slowest link of the
ring at its nominal per-direction bandwidth (``Link.gbps``): the GPU's own link within one machine, the
network between machines. A part of the communication hides behind compute (DDP all-reduces gradient
buckets during the backward pass; ZeRO-3 prefetches parameters): step time =
compute + comm − OVERLAP·min(compute, comm).

Nominal bandwidths, per GPU and per direction (half the bidirectional figure of the datasheets):
  NVLink 2 (V100 SXM2): 300 GB/s total → 150     NVIDIA Tesla V100 datasheet
  NVLink 3 (A100 SXM4): 600 GB/s total → 300     NVIDIA A100 datasheet
  NVLink 4 (H100 SXM5, H200, GH200): 900 → 450   NVIDIA H100 / H200 / GH200 datasheets
  NVLink 5 (B200): 1.8 TB/s total → 900          NVIDIA HGX B200 datasheet
  PCIe 3.0 x16: 8 GT/s × 16 × 128/130 ≈ 15.75 GB/s; PCIe 4.0 x16 ≈ 31.5 (≈ 32); PCIe 5.0 x16 ≈ 63 (≈ 64)
                                                 PCI-SIG base specifications 3.0 / 4.0 / 5.0
The RTX 4090 has no PCIe peer-to-peer in NVIDIA's driver (the MAILBOXP2P hardware is absent: tinygrad/
open-gpu-kernel-modules README; NVIDIA/nccl issue 1127), so NCCL stages every transfer through host memory:
a device-to-host and a host-to-device copy per chunk, counted as half the link. Between machines: 100 Gb/s
Ethernet, 12.5 GB/s per machine (``NETWORK_GBPS``, an assumption: a cloud GPU instance without
InfiniBand/EFA; pass another figure for a cluster with a faster fabric).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from danlu.advisor.memory import model_states
from danlu.advisor.workload import Workload
from danlu.catalog.gpu_models import GpuModel

OVERLAP = 0.5  # share of the shorter of compute and communication hidden behind the other
NETWORK_GBPS = 12.5  # between machines: 100 Gb/s Ethernet, GB/s per direction per machine


@dataclass(frozen=True, slots=True)
class Link:
    """How one GPU reaches its peers in the same machine: ``gbps`` GB/s per direction (effective)."""

    name: str
    kind: str  # "nvlink" or "pcie"
    gbps: float
    note: str = ""


NVLINK2 = Link("NVLink 2", "nvlink", 150.0)
NVLINK3 = Link("NVLink 3", "nvlink", 300.0)
NVLINK4 = Link("NVLink 4", "nvlink", 450.0)
NVLINK5 = Link("NVLink 5", "nvlink", 900.0)
PCIE3 = Link("PCIe 3.0 x16", "pcie", 15.75)
PCIE4 = Link("PCIe 4.0 x16", "pcie", 31.5)
PCIE5 = Link("PCIe 5.0 x16", "pcie", 63.0)
PCIE4_NO_P2P = Link("PCIe 4.0 x16, no P2P", "pcie", 31.5 / 2, "no peer-to-peer: staged through host memory")

# The part each GPU table row is sold as in multi-GPU instances. A100 and V100 rows are the SXM (NVLink)
# parts of 4- and 8-GPU cloud machines (p4d, a2, p3, Lambda, HGX); a PCIe instance of them is recognised by
# its instance type (PCIE_INSTANCE). Not listed: PCIe 4.0.
LINKS: dict[str, Link] = {
    "B200": NVLINK5,
    "GH200": NVLINK4,
    "H200": NVLINK4,
    "H100-80GB": NVLINK4,
    "H100-PCIE": PCIE5,
    "A100-80GB": NVLINK3,
    "A100-40GB": NVLINK3,
    "V100-32GB": NVLINK2,
    "V100": NVLINK2,
    "RTX-4090": PCIE4_NO_P2P,
    "T4": PCIE3,
    "P100": PCIE3,
    "K80": PCIE3,
}
# The PCIe card of each NVLink model (H100 PCIe and H200 NVL are Gen5, A100 PCIe Gen4, V100 PCIe Gen3).
PCIE_VARIANT = {"B200": PCIE5, "GH200": PCIE5, "H200": PCIE5, "H100-80GB": PCIE5, "V100-32GB": PCIE3, "V100": PCIE3}
# Instance types of NVLink GPU models that are PCIe cards: any name saying "pcie" (Lambda gpu_1x_h100_pcie,
# Vast H100_PCIE) and Azure's NC A100 v4 series (A100 80GB PCIe, per Azure's size documentation).
PCIE_INSTANCE = re.compile(r"pcie|^NC\d+ads A100 v4$", re.IGNORECASE)


def link_for(gpu: GpuModel, instance_type: str = "") -> Link:
    """The intra-machine link of ``gpu`` in an instance named ``instance_type`` (may be empty)."""
    link = LINKS.get(gpu.name, PCIE4)
    if link.kind == "nvlink" and instance_type and PCIE_INSTANCE.search(instance_type):
        return PCIE_VARIANT.get(gpu.name, PCIE4)
    return link


def step_bytes(w: Workload, gpu_count: int) -> float:
    """Bytes each GPU sends (and receives) per optimizer step for data-parallel training over ``gpu_count``
    GPUs; 0 on one GPU or for inference (not modelled: tensor-parallel serving moves activations)."""
    if gpu_count <= 1 or not w.training:
        return 0.0
    ring = (gpu_count - 1) / gpu_count
    # unsharded bytes: the 16-bit (fp32) weights, or the frozen base plus adapters with LoRA/QLoRA
    weights, grads, _ = model_states(w.with_(sharding="ddp"), 1)
    if w.sharding == "zero3":
        # per micro-batch: parameters gathered for forward and backward, gradients reduce-scattered
        return w.grad_accum * ring * (2.0 * weights + grads)
    return 2.0 * ring * grads


def comm_seconds(
    w: Workload, gpu_count: int, link: Link, machines: int = 1, network_gbps: float = NETWORK_GBPS
) -> float:
    """Seconds of communication per optimizer step; across machines the ring also crosses the network."""
    gbps = link.gbps if machines <= 1 else min(link.gbps, network_gbps)
    return step_bytes(w, gpu_count) / (gbps * 1e9)


def step_efficiency(compute_s: float, comm_s: float, overlap: float = OVERLAP) -> float:
    """compute / (compute + comm − overlap·min(compute, comm)): 1.0 without communication."""
    if comm_s <= 0:
        return 1.0
    return compute_s / (compute_s + comm_s - overlap * min(compute_s, comm_s))
