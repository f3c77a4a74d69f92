"""Per-GPU link bandwidths a collective group sees: scale-up (NVSwitch, GPU mesh, PCIe) and scale-out.

* intra-node: the per-GPU scale-up bandwidth (NVSwitch: ``scale_up.gb_per_s x nvlink_efficiency``;
  full mesh: ``total x (ranks-1)/(gpus-1)`` usable links x ``mesh_efficiency``; PCIe: x16 by generation x
  ``pcie_efficiency``);
* inter-node: the group's share of the node's NICs, ``nics x min(nic, fabric rate)/8 x
  achievable_fraction x network_efficiency x ranks_per_node / gpus_per_node`` (all GPUs of a node
  communicate at once, as in training), scaled by the topology's ``ring_bw_fraction`` (all-to-all:
  ``a2a_bw_fraction``) and by ``1 / (1 + congestion_penalty)`` once traffic crosses leaf switches.
"""

from __future__ import annotations

from dataclasses import dataclass

from clustertwin.comm import constants as C
from clustertwin.comm.params import CommParams
from clustertwin.comm.span import GroupSpan
from clustertwin.specs.cluster import ClusterSpec
from clustertwin.topology import pcie_x16_gb_per_s

MESH_KINDS = frozenset({"nvlink-mesh", "infinity-fabric", "hccs"})
NVLINK_KINDS = frozenset({"nvswitch", "nvlink-mesh", "infinity-fabric"})
"""Scale-up kinds on which NCCL/RCCL run LL128 (NVLink-class paths) and use the NVLink latency row."""


@dataclass(frozen=True)
class Links:
    """Per-GPU bandwidths (GB/s, one direction) and hop types a group sees; see the module docstring."""

    intra_hop: str
    """Latency row of the intra-node hop: ``nvlink`` or ``pci``."""
    intra_ring_gb_per_s: float
    """Per-GPU scale-up bandwidth a ring/tree over ``ranks_per_node`` local ranks can use."""
    intra_pair_gb_per_s: float
    """Bandwidth between one pair of local GPUs."""
    intra_a2a_gb_per_s: float
    """Aggregate bandwidth from one GPU to all other local ranks at once."""
    nvlink_gb_per_s: float
    """Effective NVSwitch port bandwidth (for NVLS); 0 without an NVSwitch."""
    nic_gb_per_s: float
    """Achievable NCCL bandwidth of one NIC."""
    group_net_gb_per_s: float
    """The group's share of its node's NICs, before topology factors."""
    ring_net_gb_per_s: float
    """Network bandwidth per node for ring/tree traffic (after spine fraction and congestion)."""
    gpu_net_gb_per_s: float
    """Per-GPU network bandwidth for point-to-point traffic (one NIC path at most; a2a spine fraction)."""
    p2p_net_gb_per_s: float
    """Network bandwidth of one send/recv stream (one NIC path, the group's share)."""


def generation(cluster: ClusterSpec) -> str:
    gpu = cluster.node.gpu
    gen = C.GPU_GENERATIONS.get(gpu.arch.strip().lower())
    if gen is not None:
        return gen
    year = gpu.release_year or 0
    # other vendors' parts: the NVIDIA generation of the same years
    for first_year, name in ((2024, "blackwell"), (2022, "hopper"), (2020, "ampere")):
        if year >= first_year:
            return name
    return "volta"


def links(cluster: ClusterSpec, ranks_per_node: int, span: GroupSpan, p: CommParams) -> Links:
    """Per-GPU link bandwidths of a group with ``ranks_per_node`` ranks on each of ``span.nodes`` nodes."""
    node = cluster.node
    g = node.gpus
    kind = node.scale_up.kind
    su = node.scale_up_gb_per_s
    if kind == "nvswitch" and su > 0:
        hop = C.NVLINK
        ring = pair = a2a = nvl = su * p.nvlink_efficiency
    elif kind in MESH_KINDS and su > 0 and g > 1:
        hop = C.NVLINK
        per_pair = su * p.mesh_efficiency / (g - 1)
        usable = max(ranks_per_node - 1, 1)
        ring = a2a = per_pair * usable
        pair, nvl = per_pair, 0.0
    else:  # PCIe through the host (also scale_up "none" with several GPUs)
        hop = C.PCI
        raw = su if (kind == "pcie" and su > 0) else pcie_x16_gb_per_s(node.gpu.pcie_gen)
        ring = pair = a2a = raw * p.pcie_efficiency
        nvl = 0.0
    fabric = cluster.fabric
    nic = min(node.nics.gbit_per_s, fabric.gbit_per_s) / 8.0 * fabric.achievable_fraction * p.network_efficiency
    node_total = node.nics.count * nic
    group_net = node_total * ranks_per_node / g
    congestion = 1.0 + (fabric.congestion_penalty if span.leaves > 1 else 0.0)
    ring_net = group_net * span.ring_bw_fraction / congestion
    gpu_net = min(nic, node_total / g) * span.a2a_bw_fraction / congestion
    p2p_net = min(nic, group_net) * span.a2a_bw_fraction / congestion
    return Links(hop, ring, pair, a2a, nvl, nic, group_net, ring_net, gpu_net, p2p_net)
