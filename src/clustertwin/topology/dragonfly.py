"""Dragonfly+ (Shpiner et al., HOTI 2017): groups are 2-tier leaf-spine fat-trees, spines carry the
global links, every pair of groups is joined by at least one global link.

Radix ``k``, oversubscription ``o``, ``P`` NIC ports per node (top-of-rack: a node's ports share one
leaf, node-leaf links copper):

* leaf: ``floor(down/P)`` nodes with ``down = k - ceil(k/(1+o))``; up-links ``u = ceil(down_used/o)``,
  one to each of the group's ``S = u`` spines;
* spine: ``k/2`` leaf-facing ports, so a group holds up to ``k/2`` leaves; its global ports are
  ``h = min(k - k/2, leaves_per_group)`` (never more global than leaf-facing links: the spine stays
  non-blocking);
* groups ``g`` (``network.dragonfly_groups`` or the fewest that hold the nodes),
  ``g <= S h + 1``; global links per pair of groups ``m = floor(S h / (g - 1))``. With ``P = 1``,
  ``o = 1``: ``g_max = k^2/4 + 1`` groups of ``k^2/4`` hosts (Shpiner 2017; cf. Kim et al. 2008).

Metrics: hops 1 (same leaf), 3 (same group), 4 (leaf-spine-spine-leaf between groups, minimal
routing); bisection (halves made of whole groups) ``min(r/2 sum_leaves min(e, u),
floor(g/2) ceil(g/2) m r)``; every switch-switch link is 1 cable + 2 transceivers.
"""

from __future__ import annotations

import math

import numpy as np

from clustertwin.errors import SpecError
from clustertwin.specs import ClusterSpec
from clustertwin.topology.common import (
    TRANSCEIVERS_PER_OPTICAL_LINK,
    choose_switch,
    fill_counts,
    leaf_port_split,
    pair_count_weighted_mean,
    uplinks_for,
)
from clustertwin.topology.model import HOPS_DRAGONFLY_GLOBAL, HOPS_SAME_LEAF, HOPS_VIA_SPINE, Topology
from clustertwin.topology.networks import DragonflyPlus
from clustertwin.topology.single import scale_up_domain
from clustertwin.units import gbit_to_gb_per_s


def dragonfly_plus(cluster: ClusterSpec) -> Topology:
    """Build the Dragonfly+ network of ``cluster`` (module docstring)."""
    net = cluster.net
    n_nodes, nics = cluster.nodes, cluster.node.nics.count
    endpoints = n_nodes * nics
    port_gb = gbit_to_gb_per_s(net.fabric.gbit_per_s)
    sw = choose_switch(cluster)
    k, o = sw.radix, float(net.leaf_oversubscription)
    notes = list(sw.notes)
    down_max, _ = leaf_port_split(k, o)
    npl = down_max // nics
    if npl < 1:
        raise SpecError(
            f"a node's {nics} NIC ports exceed the {down_max} down-ports of a {k}-port leaf",
            path=("network", "switch"),
        )
    up = uplinks_for(npl * nics, o)
    spines_per_group = up
    spine_down = k // 2
    max_group_nodes = spine_down * npl
    if net.dragonfly_groups is not None:
        groups = int(net.dragonfly_groups)
        if groups > n_nodes:
            raise SpecError(f"{groups} groups for {n_nodes} nodes", path=("network", "dragonfly_groups"))
    else:
        groups = math.ceil(n_nodes / max_group_nodes)
    npg = math.ceil(n_nodes / groups)
    if math.ceil(n_nodes / npg) != groups:
        notes.append(f"{groups} groups of {npg} nodes leave empty groups: built {math.ceil(n_nodes / npg)}")
        groups = math.ceil(n_nodes / npg)
    lpg = math.ceil(npg / npl)
    if lpg > spine_down:
        raise SpecError(
            f"{npg} nodes per group need {lpg} leaves; a {k}-port spine serves {spine_down}",
            path=("network", "dragonfly_groups"),
        )
    h = min(k - spine_down, lpg)
    global_ports = spines_per_group * h
    if groups - 1 > global_ports:
        max_nodes = (spines_per_group * min(k - spine_down, spine_down) + 1) * max_group_nodes
        raise SpecError(
            f"{groups} groups exceed the {global_ports + 1} a {k}-port Dragonfly+ connects "
            f"(at most {max_nodes} nodes)",
            path=("nodes",),
        )
    m = global_ports // (groups - 1) if groups > 1 else 0
    n_global = groups * (groups - 1) // 2 * m
    n_leaves = groups * lpg
    # endpoints per leaf and per group (nodes fill group by group, leaf by leaf)
    group_nodes = fill_counts(n_nodes, npg, groups)
    full_group_leaves = fill_counts(npg, npl, lpg)
    last_group_leaves = fill_counts(int(group_nodes[-1]), npl, math.ceil(int(group_nodes[-1]) / npl))
    leaf_nodes = np.concatenate([np.tile(full_group_leaves, groups - 1), last_group_leaves])
    share_leaf = pair_count_weighted_mean(leaf_nodes * nics, endpoints)
    share_group = pair_count_weighted_mean(group_nodes * nics, endpoints)
    avg = (
        HOPS_SAME_LEAF * share_leaf
        + HOPS_VIA_SPINE * (share_group - share_leaf)
        + HOPS_DRAGONFLY_GLOBAL * (1.0 - share_group)
    )
    if share_leaf >= 1.0:
        diameter = HOPS_SAME_LEAF
    elif share_group >= 1.0:
        diameter = HOPS_VIA_SPINE
    else:
        diameter = HOPS_DRAGONFLY_GLOBAL
    leaf_cap = port_gb / 2.0 * float(np.minimum(leaf_nodes * nics, up).sum())
    if len(leaf_nodes) == 1:
        leaf_cap = endpoints * port_gb / 2.0
    global_cap = (groups // 2) * (groups - groups // 2) * m * port_gb if groups > 1 else math.inf
    bisection = min(leaf_cap, global_cap)
    if global_ports - (groups - 1) * m:
        notes.append(f"{global_ports - (groups - 1) * m} global ports per group unused")
    links = {"node-leaf": endpoints, "leaf-spine": n_leaves * up, "global": n_global}
    switch_links = links["leaf-spine"] + n_global
    return DragonflyPlus(
        kind="dragonfly+",
        nodes=n_nodes,
        gpus_per_node=cluster.node.gpus,
        gpus=cluster.total_gpus,
        endpoints=endpoints,
        port_gb_per_s=port_gb,
        switches={"leaf": n_leaves, "spine": groups * spines_per_group},
        links=links,
        cables=int(endpoints + switch_links),
        transceivers=TRANSCEIVERS_PER_OPTICAL_LINK * int(switch_links),
        bisection_gb_per_s=float(bisection),
        diameter_hops=int(diameter),
        avg_hops=float(avg),
        oversubscription=max(1.0, npl * nics / up),
        nodes_per_leaf=npl,
        nodes_per_pod=npg,
        scale_up_domain_gpus=cluster.node.gpus,
        notes=tuple(notes),
        scale_up=scale_up_domain(cluster.node),
        layout={
            "radix": k,
            "groups": groups,
            "nodes_per_group": npg,
            "leaves_per_group": lpg,
            "spines_per_group": spines_per_group,
            "global_ports_per_spine": h,
            "global_links_per_pair": m,
            "leaf_up": up,
        },
    )
