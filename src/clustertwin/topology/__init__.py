"""Network topologies: single node, fat-tree (top-of-rack and rail-optimised), 3D torus, Dragonfly+.

``build(cluster) -> Topology`` gives switches and links per tier, cables and transceivers, bisection
bandwidth, diameter and average hops, and vectorised node/GPU addresses and group spans that the
collective and placement models use. Formulas and sources: docs/topology.md.
"""

from clustertwin.topology.allocation import allocation_nodes
from clustertwin.topology.build import build
from clustertwin.topology.model import GroupSpan, ScaleUpDomain, Topology
from clustertwin.topology.single import pcie_x16_gb_per_s, scale_up_domain
from clustertwin.topology.traffic import GroupTraffic, group_bandwidth, groups_of, place

__all__ = ["GroupSpan", "GroupTraffic", "ScaleUpDomain", "Topology", "allocation_nodes", "build", "group_bandwidth",
           "groups_of", "pcie_x16_gb_per_s", "place", "scale_up_domain"]
