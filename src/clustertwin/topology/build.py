"""Dispatch: one node -> ``single``; else ``cluster.network.topology`` picks the builder."""

from __future__ import annotations

from clustertwin.specs import ClusterSpec
from clustertwin.topology.dragonfly import dragonfly_plus
from clustertwin.topology.fattree import fat_tree
from clustertwin.topology.model import Topology
from clustertwin.topology.single import single_node
from clustertwin.topology.torus import torus3d


def build(cluster: ClusterSpec) -> Topology:
    """The cluster's network with its metrics.

    ``single`` with several nodes is one switch (a 2-tier fat-tree if the endpoints exceed its ports);
    ``fat-tree`` is top-of-rack with ``network.tiers`` tiers; ``rail-optimized`` the DGX SuperPOD
    design in scalable units; ``torus3d`` a direct 3D torus; ``dragonfly+`` leaf-spine groups joined by
    global links. Cost is O(switches): no per-GPU objects.
    """
    if cluster.nodes == 1:
        return single_node(cluster)
    kind = cluster.net.topology
    if kind == "torus3d":
        return torus3d(cluster)
    if kind == "dragonfly+":
        return dragonfly_plus(cluster)
    return fat_tree(cluster, kind)
