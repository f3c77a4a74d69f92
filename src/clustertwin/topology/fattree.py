"""Fat-trees (folded Clos) with 1, 2 or 3 switch tiers: top-of-rack and rail-optimised.

Radix ``k`` at the fabric rate, requested oversubscription ``o`` (leaf down:up), ``P`` NIC ports per
node. Construction (docs/topology.md has the derivations):

* **Top-of-rack** (``fat-tree``): all ``P`` ports of a node go to one leaf. Leaf ports split
  ``up = ceil(k/(1+o))``, ``down = k - up``; nodes per leaf ``floor(down/P)``; used up-ports
  ``ceil(nodes_per_leaf x P / o)``. Node-leaf links are copper DAC (same rack).
* **Rail-optimised** (DGX SuperPOD): a scalable unit (SU) of ``su_nodes`` node slots has one leaf per
  rail; NIC ``i`` of every node in the SU goes to leaf ``i``. A leaf serves ``rails_per_leaf =
  max(1, floor(down/su))`` rails (1 for DGX SUs of 32 nodes on 64-port leaves; several for small SUs of
  NVL72 racks), so an SU has ``B = ceil(P / rails_per_leaf)`` leaves. Leaf: ``su x rails_per_leaf``
  down, ``ceil(that/o)`` up.
  If ``network.su_nodes`` is not set and the SU does not fit the radix (leaf ports, or ``B > k/2`` for a
  3-tier pod), the SU is shrunk to fit (with a note). Node-leaf links are optical (leaves sit in other
  racks).
* **2 tiers**: every leaf spreads its ``u`` up-links evenly over ``S`` spines with
  ``S | u`` and ``S >= ceil(L u / k)`` (smallest such); feasible while ``L <= k``. For the k-ary
  non-blocking case ``L = k``, ``S = k/2``, hosts ``k^2/2``.
* **3 tiers**: spines split ``k/2`` down, ``k/2`` up; a pod holds ``floor((k/2)/B)`` whole SUs
  (top-of-rack: ``k/2`` leaves); pod spines ``S_p | u``, ``S_p >= ceil(leaves_per_pod u / (k/2))``;
  spine ``j`` of every pod connects to core group ``j`` of ``c`` cores, ``c | spine_up``,
  ``c >= ceil(pods x spine_up / k)``; feasible while ``pods <= k``. For the k-ary fat-tree
  (Al-Fares et al. 2008): ``k`` pods, ``(k/2)^2`` cores, ``k^3/4`` hosts, ``5k^2/4`` switches.

A requested tier count that the radix cannot hold is raised by one (with a note); beyond 3 tiers the
cluster is a :class:`~clustertwin.errors.SpecError`.

Partly filled leaves (the last top-of-rack leaf, a rail-optimised SU at most half full) get the up-links
their endpoints need, ``ceil(endpoints on the leaf / o)``; an SU more than half full keeps the full build-out
of the SuperPOD RA (31 DGX in 32 slots: Table 4). Spines are sized from the up-links actually cabled; a fabric whose
endpoints all fit one switch has no spine (1 tier), whatever tier count was asked for.

Metrics: every switch-switch link is 1 cable + 2 transceivers; bisection (halves made of whole
leaves) ``r/2 x sum over leaves of min(endpoints on leaf, up-links)`` (= ``E r / 2`` when every rail has
a single leaf); hops 1 / 3 / 5 switches for same leaf / same pod / across the core; average hops over
all ordered pairs of distinct endpoints.
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
    smallest_divisor_at_least,
    uplinks_for,
)
from clustertwin.topology.model import HOPS_SAME_LEAF, HOPS_VIA_CORE, HOPS_VIA_SPINE, Topology
from clustertwin.topology.networks import fat_tree_class
from clustertwin.topology.single import scale_up_domain
from clustertwin.units import gbit_to_gb_per_s

MAX_TIERS = 3


def fat_tree(cluster: ClusterSpec, kind: str = "fat-tree") -> Topology:
    """Build a top-of-rack (``kind`` "fat-tree" or "single" = one switch) or rail-optimised
    (``kind`` "rail-optimized") fat-tree for ``cluster`` (module docstring)."""
    net = cluster.net
    n_nodes, nics = cluster.nodes, cluster.node.nics.count
    endpoints = n_nodes * nics
    port_gb = gbit_to_gb_per_s(net.fabric.gbit_per_s)
    sw = choose_switch(cluster)
    k = sw.radix
    o = float(net.leaf_oversubscription)
    notes = list(sw.notes)
    rail = kind == "rail-optimized"
    tiers = 1 if kind == "single" else int(net.tiers)

    # ---- tier 1: every rail on a single switch (asked for, or top-of-rack endpoints that fit one switch)
    if tiers > 1 and not rail and endpoints <= k:
        notes.append(f"all {endpoints} endpoints fit one {k}-port switch: 1 tier, no spine")
        tiers = 1
    if tiers == 1:
        fits = n_nodes <= k if rail else endpoints <= k
        if fits:
            return _assemble(
                cluster,
                kind,
                sw_notes=notes,
                radix=k,
                tiers=1,
                rails_per_leaf=1 if rail else nics,
                npl=n_nodes,
                leaf_down=n_nodes if rail else endpoints,
                leaf_up=0,
                port_gb=port_gb,
            )
        notes.append(f"{'rail' if rail else 'all'} endpoints exceed one {k}-port switch: built 2 tiers")
        tiers = 2
        if kind == "single":
            kind = "fat-tree"

    # ---- leaf ports
    if rail:
        explicit = "su_nodes" in net.model_fields_set
        su, rpl, leaf_down, up = _rail_leaf(net.su_nodes, nics, k, o, explicit)
        if su != net.su_nodes:
            notes.append(f"scalable unit sized to the {k}-port leaf: {su} nodes")
        block = math.ceil(nics / rpl)
        too_wide = block > k // 2 and math.ceil(n_nodes / su) * block > k
        if too_wide and not explicit:  # SU leaves must fit one 3-tier pod: B <= k/2
            down_max, _ = leaf_port_split(k, o)
            su = max(1, down_max // math.ceil(nics / (k // 2)))
            su, rpl, leaf_down, up = _rail_leaf(su, nics, k, o, False)
            block = math.ceil(nics / rpl)
            notes.append(f"scalable unit of {su} nodes ({rpl} rails per leaf) so an SU fits a pod")
        npl = su
    else:
        down_max, _ = leaf_port_split(k, o)
        npl, rpl, block = down_max // nics, nics, 1
        if npl < 1:
            raise SpecError(
                f"a node's {nics} NIC ports exceed the {down_max} down-ports of a {k}-port leaf",
                path=("network", "switch"),
            )
        leaf_down = npl * nics
        up = uplinks_for(leaf_down, o)
    n_leaves = math.ceil(n_nodes / npl) * block

    if n_leaves == 1:  # every endpoint on one switch: no spine, whatever tier count was asked for
        notes.append(f"all {endpoints} endpoints fit one {k}-port switch: 1 tier, no spine")
        return _assemble(cluster, kind, sw_notes=notes, radix=k, tiers=1, rails_per_leaf=rpl, npl=npl,
                         leaf_down=endpoints, leaf_up=0, port_gb=port_gb)
    if tiers == 2 and n_leaves > k:
        notes.append(f"{n_leaves} leaves exceed a 2-tier {k}-port fabric: added a core tier")
        tiers = MAX_TIERS
    return _assemble(
        cluster,
        kind,
        sw_notes=notes,
        radix=k,
        tiers=tiers,
        rails_per_leaf=rpl,
        npl=npl,
        leaf_down=leaf_down,
        leaf_up=up,
        port_gb=port_gb,
    )


def _rail_leaf(su: int, nics: int, k: int, o: float, explicit: bool) -> tuple[int, int, int, int]:
    """(su, rails per leaf, leaf down-ports used, leaf up-ports) of a rail-optimised leaf."""
    down_max, _ = leaf_port_split(k, o)
    if su + uplinks_for(su, o) > k:
        if explicit:
            raise SpecError(
                f"su_nodes={su} plus {uplinks_for(su, o)} up-links exceed the {k}-port leaf at "
                f"oversubscription {o:g}",
                path=("network", "su_nodes"),
            )
        su = down_max
    rpl = min(nics, max(1, down_max // su))
    return su, rpl, su * rpl, uplinks_for(su * rpl, o)


def _assemble(
    cluster: ClusterSpec,
    kind: str,
    *,
    sw_notes: list[str],
    radix: int,
    tiers: int,
    rails_per_leaf: int,
    npl: int,
    leaf_down: int,
    leaf_up: int,
    port_gb: float,
) -> Topology:
    """Switch/link counts and metrics for a chosen leaf configuration (module docstring)."""
    k, n_nodes, nics = radix, cluster.nodes, cluster.node.nics.count
    endpoints = n_nodes * nics
    notes = list(sw_notes)
    rail = kind == "rail-optimized"
    rails = math.ceil(nics / rails_per_leaf)  # leaves per block (SU); 1 for top-of-rack
    rails_on_leaf = fill_counts(nics, rails_per_leaf, rails)
    n_blocks = math.ceil(n_nodes / npl)  # blocks: SUs (rail-optimised) or leaves (top-of-rack)
    n_leaves = n_blocks * rails
    nodes_on_block = fill_counts(n_nodes, npl, n_blocks)
    ep_on_leaf = (nodes_on_block[:, None] * rails_on_leaf[None, :]).ravel()  # endpoints on each leaf
    # up-links of each leaf from the endpoints it serves; a rail-optimised SU more than half full keeps the
    # SuperPOD RA's full build-out (31 of 32 slots: 256 spine-leaf cables, RA Table 4)
    o_leaf = float(cluster.net.leaf_oversubscription)
    built_out = np.repeat(nodes_on_block * 2 > npl, rails) if rail else np.zeros(n_leaves, dtype=bool)
    up_on_leaf = np.array([leaf_up if full else min(leaf_up, uplinks_for(int(e), o_leaf))
                           for e, full in zip(ep_on_leaf, built_out, strict=True)]) if leaf_up \
        else np.zeros_like(ep_on_leaf)
    total_up = int(up_on_leaf.sum())
    switches: dict[str, int] = {"leaf": n_leaves}
    links = {"node-leaf": endpoints, "leaf-spine": 0, "spine-core": 0}
    layout: dict[str, int | float] = {
        "radix": k,
        "tiers": tiers,
        "rails": rails,
        "rails_per_leaf": rails_per_leaf,
        "leaf_down": leaf_down,
        "leaf_up": leaf_up,
        "leaves_per_rail": n_blocks,
    }
    nodes_per_pod = n_nodes
    pods = 1
    if tiers == 2:
        most_up = int(up_on_leaf.max())
        spines = smallest_divisor_at_least(most_up, math.ceil(total_up / k))
        if spines is None:  # guarded by the caller: n_leaves <= k
            raise SpecError(f"{n_leaves} leaves exceed a 2-tier {k}-port fabric", path=("network", "tiers"))
        switches["spine"] = spines
        links["leaf-spine"] = total_up
        layout.update(spines_per_pod=spines, leaves_per_pod=n_leaves, pods=1)
    elif tiers == MAX_TIERS:
        o_pod = float(cluster.net.tier_oversubscription[1]) if len(cluster.net.tier_oversubscription) > 1 else 1.0
        spine_down, _ = leaf_port_split(k, o_pod)  # spine ports: down:up <= o_pod (k/2 : k/2 at 1:1)
        blocks_per_pod = spine_down // rails
        if blocks_per_pod < 1:
            raise SpecError(
                f"{rails} leaves per scalable unit exceed the {spine_down} down-ports of a "
                f"{k}-port spine; set network.su_nodes smaller",
                path=("network", "switch"),
            )
        leaves_per_pod = blocks_per_pod * rails
        pods = math.ceil(n_blocks / blocks_per_pod)
        pod_spines = smallest_divisor_at_least(leaf_up, math.ceil(leaves_per_pod * leaf_up / spine_down))
        assert pod_spines is not None  # leaves_per_pod <= spine_down
        spine_down_used = leaves_per_pod * leaf_up // pod_spines
        spine_up = uplinks_for(spine_down_used, o_pod)
        cores_per_group = smallest_divisor_at_least(spine_up, math.ceil(pods * spine_up / k))
        if cores_per_group is None:
            max_nodes = k * blocks_per_pod * npl
            raise SpecError(
                f"{n_nodes} nodes exceed a 3-tier fabric of {k}-port switches (at most {max_nodes} nodes "
                f"at oversubscription {cluster.net.leaf_oversubscription:g}); use a higher-radix switch, "
                "oversubscription or dragonfly+",
                path=("nodes",),
            )
        switches["spine"] = pods * pod_spines
        switches["core"] = pod_spines * cores_per_group
        links["leaf-spine"] = total_up
        links["spine-core"] = math.ceil(total_up / (spine_down_used / spine_up) - 1e-9)
        nodes_per_pod = blocks_per_pod * npl
        layout.update(
            spines_per_pod=pod_spines,
            leaves_per_pod=leaves_per_pod,
            pods=pods,
            spine_up=spine_up,
            spine_down=spine_down_used,
            cores_per_group=cores_per_group,
            pod_oversubscription=spine_down_used / spine_up,
        )
    else:
        layout.update(spines_per_pod=0, leaves_per_pod=n_leaves, pods=1)

    # ---- hops
    share_leaf = pair_count_weighted_mean(ep_on_leaf, endpoints)
    if tiers == 1:
        diameter, avg = HOPS_SAME_LEAF, float(HOPS_SAME_LEAF)
        if rail and rails > 1:
            notes.append("rail-only (1 tier): cross-rail traffic moves over the scale-up domain first")
    else:
        pod_nodes = fill_counts(n_nodes, nodes_per_pod, pods) * nics
        share_pod = pair_count_weighted_mean(pod_nodes, endpoints) if tiers == MAX_TIERS else 1.0
        avg = (
            HOPS_SAME_LEAF * share_leaf
            + HOPS_VIA_SPINE * (share_pod - share_leaf)
            + HOPS_VIA_CORE * (1.0 - share_pod)
        )
        if share_leaf >= 1.0:
            diameter = HOPS_SAME_LEAF
        elif share_pod >= 1.0:
            diameter = HOPS_VIA_SPINE
        else:
            diameter = HOPS_VIA_CORE

    # ---- bandwidth
    if tiers == 1 or n_blocks == 1:
        bisection = endpoints * port_gb / 2.0
    else:
        bisection = port_gb / 2.0 * float(np.minimum(ep_on_leaf, up_on_leaf).sum())
        if pods > 1:  # halves made of whole pods: at most the spine-core links of half the pods
            bisection = min(bisection, port_gb / 2.0 * links["spine-core"])
    full_leaf_endpoints = npl * rails_per_leaf
    oversub = 1.0 if tiers == 1 else max(1.0, full_leaf_endpoints / leaf_up)

    switch_links = links["leaf-spine"] + links["spine-core"]
    cables = endpoints + switch_links
    transceivers = TRANSCEIVERS_PER_OPTICAL_LINK * (switch_links + (endpoints if rail else 0))
    dom = scale_up_domain(cluster.node)
    return fat_tree_class(kind)(
        kind=kind,
        nodes=n_nodes,
        gpus_per_node=cluster.node.gpus,
        gpus=cluster.total_gpus,
        endpoints=endpoints,
        port_gb_per_s=port_gb,
        switches=switches,
        links=links,
        cables=int(cables),
        transceivers=int(transceivers),
        bisection_gb_per_s=float(bisection),
        diameter_hops=int(diameter),
        avg_hops=float(avg),
        oversubscription=float(oversub),
        nodes_per_leaf=npl,
        nodes_per_pod=nodes_per_pod,
        scale_up_domain_gpus=cluster.node.gpus,
        notes=tuple(notes),
        scale_up=dom,
        layout=layout,
    )
