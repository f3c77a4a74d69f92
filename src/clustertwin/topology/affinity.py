"""GPU-NIC affinity inside a node: which NIC each GPU's scale-out traffic uses, whether the pair shares a
PCIe switch, and what a misaligned mapping costs.

Relations (``nvidia-smi topo -m`` names): ``PIX``/``PXB`` = same PCIe switch, ``PHB`` = same CPU socket
through the host bridge, ``SYS`` = across the CPU-to-CPU link (UPI / xGMI). NCCL uses GPUDirect RDMA only
up to ``NCCL_NET_GDR_LEVEL`` (default ``PXB``, NCCL environment documentation); beyond it, data is staged
through host memory. Penalty model (formula, not a fit):

* ``PIX``: the NIC's full rate, no extra latency;
* ``PHB``: staged through host memory on the same socket: full rate (host memory bandwidth exceeds one
  NIC), plus :data:`STAGING_LATENCY_US` per message;
* ``SYS``: staged and crossing sockets: the ``x`` misaligned flows crossing in the same direction share
  the socket link, ``per-NIC = min(NIC, socket_link_gb_per_s / x)``, plus the staging latency and
  :data:`CROSS_SOCKET_LATENCY_US`.

The node's effective scale-out bandwidth is the sum over NICs in use of their effective rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clustertwin.errors import SpecError
from clustertwin.specs.node import NodeSpec
from clustertwin.units import BITS_PER_BYTE

STAGING_LATENCY_US = 2.0
"""Extra latency of a host-staged transfer (one device-host copy each side, ~1 µs each; estimate from
CUDA pinned-memory copy latency)."""
CROSS_SOCKET_LATENCY_US = 0.5
"""One UPI / xGMI traversal (~100-200 ns) each way plus the remote memory access; estimate."""


@dataclass(frozen=True)
class Affinity:
    relations: tuple[str, ...]
    """Relation of each GPU to its NIC: PIX, PHB or SYS."""
    per_nic_gb_per_s: tuple[float, ...]
    """Effective rate of each GPU's NIC path, GB/s."""
    bandwidth_factor: float
    """Effective node scale-out bandwidth / aligned bandwidth."""
    extra_latency_us: float
    """Worst extra latency per message."""
    misaligned_gpus: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"relations": list(self.relations), "per_nic_gb_per_s": list(self.per_nic_gb_per_s),
                "bandwidth_factor": self.bandwidth_factor, "extra_latency_us": self.extra_latency_us,
                "misaligned_gpus": list(self.misaligned_gpus)}


def aligned_mapping(node: NodeSpec) -> list[int]:
    """The NIC NCCL would pick for each GPU: a NIC under the GPU's PCIe switch (round-robin when a switch
    has several GPUs per NIC), else one on the same socket, else any (GPU index modulo NICs)."""
    nics = node.nics.count
    if node.pcie is None:
        return [g * nics // node.gpus for g in range(node.gpus)]
    out = [-1] * node.gpus
    for grp in node.pcie:
        pool = list(grp.nics) or [n for other in node.pcie if other.numa == grp.numa for n in other.nics]
        for i, g in enumerate(grp.gpus):
            out[g] = pool[i % len(pool)] if pool else g % nics
    return out


def relation(node: NodeSpec, gpu: int, nic: int) -> str:
    """PIX (same PCIe switch), PHB (same socket) or SYS (other socket); PIX when the layout is unknown."""
    if node.pcie is None:
        return "PIX"
    g = next(grp for grp in node.pcie if gpu in grp.gpus)
    if nic in g.nics:
        return "PIX"
    owner = next((grp for grp in node.pcie if nic in grp.nics), None)
    if owner is None:
        return "SYS"
    return "PHB" if owner.numa == g.numa else "SYS"


def affinity(node: NodeSpec, gpu_to_nic: list[int] | None = None) -> Affinity:
    """Cost of a GPU -> NIC mapping (default: :func:`aligned_mapping`); formulas in the module docstring."""
    if gpu_to_nic is None:
        gpu_to_nic = list(node.gpu_to_nic) if node.gpu_to_nic is not None else None
    mapping = aligned_mapping(node) if gpu_to_nic is None else list(gpu_to_nic)
    if len(mapping) != node.gpus or any(not 0 <= n < node.nics.count for n in mapping):
        raise SpecError(f"gpu_to_nic must give a NIC in 0..{node.nics.count - 1} for each of {node.gpus} GPUs "
                        f"(got {mapping})")
    nic_gb = node.nics.gbit_per_s / BITS_PER_BYTE
    rel = tuple(relation(node, g, n) for g, n in enumerate(mapping))
    numa_gpu = {g: grp.numa for grp in node.pcie or () for g in grp.gpus}
    numa_nic = {n: grp.numa for grp in node.pcie or () for n in grp.nics}
    direction = [(numa_gpu.get(g), numa_nic.get(n)) for g, n in enumerate(mapping)]
    flows: dict[tuple, int] = {}
    for r, d in zip(rel, direction, strict=True):
        if r == "SYS":
            flows[d] = flows.get(d, 0) + 1
    link = node.socket_link_gb_per_s
    per = []
    for r, d in zip(rel, direction, strict=True):
        if r == "SYS" and link is not None:
            per.append(min(nic_gb, link / flows[d]))
        else:
            per.append(nic_gb)
    used = {}
    for n, bw in zip(mapping, per, strict=True):  # GPUs sharing a NIC share its rate
        used[n] = min(nic_gb, used.get(n, 0.0) + bw)
    aligned = min(node.gpus, node.nics.count) * nic_gb
    lat = max((STAGING_LATENCY_US + (CROSS_SOCKET_LATENCY_US if r == "SYS" else 0.0)) if r != "PIX" else 0.0
              for r in rel)
    return Affinity(relations=rel, per_nic_gb_per_s=tuple(per), bandwidth_factor=sum(used.values()) / aligned,
                    extra_latency_us=lat, misaligned_gpus=tuple(g for g, r in enumerate(rel) if r != "PIX"))


def affinity_warnings(node: NodeSpec, gpu_to_nic: list[int] | None = None) -> list[str]:
    """Plan warnings: GPUs whose NIC path is not under their PCIe switch, with the cost."""
    if node.pcie is None:
        return []
    a = affinity(node, gpu_to_nic)
    if not a.misaligned_gpus:
        return []
    gpus = ", ".join(str(g) for g in a.misaligned_gpus)
    return [f"GPUs {gpus} reach their NIC through the host ({', '.join(sorted(set(a.relations) - {'PIX'}))}): "
            f"NCCL stages through host memory (no GPUDirect RDMA), node scale-out bandwidth x"
            f"{a.bandwidth_factor:.2f}, +{a.extra_latency_us:g} µs per message"]
