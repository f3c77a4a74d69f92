"""Scale-up domain of one node, and the one-node topology.

Per-GPU bandwidth ``B`` (per direction) is the node's ``scale_up.gb_per_s`` (H100 NVLink4: 450 GB/s);
for ``pcie`` with no figure it is the x16 link rate of the GPU's PCIe generation:
``GT/s x 16 lanes x encoding / 8`` (PCI-SIG base specifications: 8b/10b for Gen1-2, 128b/130b for
Gen3-5, 242/256 FLIT efficiency for Gen6 PAM4).

* ``nvswitch`` and ``pcie`` (switched): any pair gets ``B``; bisection ``G/2 x B``; 1 switch hop.
  PCIe is treated as a non-blocking switch tree (an upper bound: root-complex and inter-socket limits
  are ignored).
* ``nvlink-mesh``, ``infinity-fabric``, ``hccs`` (direct full mesh, e.g. MI300X: 7 x 64 GB/s): per
  pair ``B/(G-1)``; a balanced cut crosses ``(G/2)^2`` pair links: bisection ``(G/2)^2 B/(G-1)``;
  0 switch hops.
* ``none``: no scale-up bandwidth.
"""

from __future__ import annotations

from clustertwin.specs import ClusterSpec, NodeSpec
from clustertwin.topology.model import ScaleUpDomain, Topology
from clustertwin.topology.networks import SingleNode
from clustertwin.units import gbit_to_gb_per_s, pcie_x16_gb_per_s

SWITCHED_KINDS = ("nvswitch", "pcie")
MESH_KINDS = ("nvlink-mesh", "infinity-fabric", "hccs")


def scale_up_domain(node: NodeSpec) -> ScaleUpDomain:
    """Per-GPU, per-pair and bisection bandwidth of the node's scale-up domain (module docstring)."""
    kind = node.scale_up.kind
    g = node.gpus
    per_gpu = node.scale_up_gb_per_s
    if kind == "pcie" and per_gpu <= 0:
        per_gpu = pcie_x16_gb_per_s(node.gpu.pcie_gen)
    if g == 1 or kind == "none":
        return ScaleUpDomain(kind, g, per_gpu if g > 1 else 0.0, 0.0, 0.0, 0, node.scale_up.switches)
    half = g // 2
    if kind in MESH_KINDS:
        pair = per_gpu / (g - 1)
        return ScaleUpDomain(kind, g, per_gpu, pair, half * (g - half) * pair, 0, node.scale_up.switches)
    return ScaleUpDomain(kind, g, per_gpu, per_gpu, half * per_gpu, 1, node.scale_up.switches)


def single_node(cluster: ClusterSpec) -> Topology:
    """One node: no scale-out switches; bisection and hops are those of the scale-up domain."""
    node = cluster.node
    dom = scale_up_domain(node)
    return SingleNode(
        kind="single",
        nodes=1,
        gpus_per_node=node.gpus,
        gpus=node.gpus,
        endpoints=node.nics.count,
        port_gb_per_s=gbit_to_gb_per_s(cluster.fabric.gbit_per_s),
        switches={},
        links={},
        cables=0,
        transceivers=0,
        bisection_gb_per_s=dom.bisection_gb_per_s,
        diameter_hops=dom.hops,
        avg_hops=float(dom.hops),
        oversubscription=1.0,
        nodes_per_leaf=1,
        nodes_per_pod=1,
        scale_up_domain_gpus=node.gpus,
        notes=(f"one node: {dom.kind} scale-up domain of {node.gpus} GPUs, no scale-out network",),
        scale_up=dom,
        layout={},
    )
