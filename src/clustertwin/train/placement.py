"""Parallel groups of a layout: the one owner of their sizes and of where their ranks sit.

Sizes: TP ``tp``, CP ``cp``, the dense gradient group DP x CP, the expert groups EP, expert-TP and
expert-DP ``tp cp dp / (etp ep)`` folded over the dense ranks (:mod:`clustertwin.train.moe_layout`), PP.
Each :class:`Group` carries its size, ranks per node, stride and traffic pattern; nothing else derives them.

**Rank order** (Megatron-Core's default ``tp-cp-ep-dp-pp``, fastest first): global rank
``r = tp_rank + tp (cp_rank + cp (dp_rank + dp pp_rank))`` with the EP ranks the fastest part of DP, and
GPU ``r`` on node ``r // gpus_per_node``. A group whose members are ``stride`` ranks apart and that has
``size`` members holds

    ranks per node = min(size, gpus_per_node / stride)   when stride < gpus_per_node, else 1

so every group is costed with its real footprint: TP larger than a node spans ``tp / gpus_per_node``
nodes (costed over the network, not rejected); CP (stride tp), EP (stride tp cp), the DP x CP gradient
group (stride tp), expert-DP (stride tp ep) and PP (stride tp cp dp). A pipeline hop between stages i and
i + 1 stays inside a node only when the whole pipe of ``pp`` stages fits in one node (``stride pp <=
gpus_per_node``); otherwise some hop crosses the network and, since every stage waits for the slowest
hop in the steady state, the hop is costed as a network send/recv.

The collective model (:mod:`clustertwin.comm`, via :mod:`clustertwin.train.collectives`) is asked for
each group with its size and ranks per node; :func:`placement_of` describes a group's footprint (nodes,
leaves, pods crossed) with :func:`clustertwin.comm.placement.contiguous_placement`.
"""

from __future__ import annotations

from dataclasses import dataclass

from clustertwin.comm.placement import Placement, contiguous_placement
from clustertwin.specs.cluster import ClusterSpec
from clustertwin.train.layout import Layouts, fmax, fmin, scalar, where
from clustertwin.train.moe_layout import expert_groups


@dataclass
class Group:
    """One parallel group: members, members per node, their stride in the rank order and the traffic pattern
    of its collective (ints or int arrays). The one place group shapes are defined: the collective model,
    the topology traffic pass (:mod:`clustertwin.train.topology_comm`) and ``explain`` all read them here."""

    size: object
    ranks_per_node: object
    stride: object = 1
    """ranks between neighbouring members in the rank order (module docstring)"""
    pattern: str = "ring"
    """traffic pattern on the fabric: ``ring`` (all-reduce/all-gather/reduce-scatter, p2p) or ``all_to_all``"""
    span: object = None
    """members whose node footprint carries the traffic when it differs from ``size`` (the pipeline: a hop
    is a pair of stages, the concurrent hops span all ``pp`` stages)"""
    net_fraction: object = None
    """share of injection bandwidth under concurrent groups (:mod:`clustertwin.train.topology_comm`)"""
    net_hops: object = None
    """switch hops of the group where the placement puts it (:mod:`clustertwin.train.topology_comm`)"""


@dataclass
class Groups:
    """Every parallel group of a layout."""

    tp: Group
    cp: Group
    dp: Group
    """dense gradient group: DP x CP"""
    ep: Group
    edp: Group
    """expert gradient group: DP x CP / EP"""
    pp: Group
    """one pipeline hop: a pair of neighbouring stages"""
    etp: Group
    """expert tensor parallelism (ETP; = TP unless set)"""

    KINDS = ("tp", "cp", "dp", "ep", "edp", "pp", "etp")
    """Every group kind, in the order the traffic pass reports them."""

    def shapes(self) -> dict[str, tuple[object, object, str]]:
        """``kind -> (members placed, stride, pattern)`` for the topology traffic pass."""
        out = {}
        for kind in self.KINDS:
            g: Group = getattr(self, kind)
            out[kind] = (g.size if g.span is None else g.span, g.stride, g.pattern)
        return out


def ranks_per_node(size, stride, gpus_per_node: int):
    """Members per node of a group of ``size`` ranks ``stride`` apart in the rank order."""
    inner = fmax(gpus_per_node // stride, 1)
    return where(stride < gpus_per_node, fmin(size, inner), 1)


def groups(lay: Layouts, gpus_per_node: int) -> Groups:
    """Sizes and ranks per node of every group of ``lay`` (vectorised)."""
    tp, cp, dp, pp = lay.tp, lay.cp, lay.dp, lay.pp
    gpn = gpus_per_node
    dpcp = dp * cp
    eg = expert_groups(lay, gpn, ranks_per_node)  # MoE parallel folding (moe_layout)
    pp_stride = tp * cp * dp
    return Groups(
        tp=Group(tp, fmin(tp, gpn)),
        cp=Group(cp, ranks_per_node(cp, tp, gpn), stride=tp),
        dp=Group(dpcp, ranks_per_node(dpcp, tp, gpn), stride=tp),
        ep=Group(eg.ep, eg.ep_rpn, stride=eg.ep_stride, pattern="all_to_all"),
        edp=Group(eg.edp, eg.edp_rpn, stride=eg.edp_stride),
        pp=Group(where(pp > 1, 2, 1), where(pp_stride * pp <= gpn, 2, 1), stride=pp_stride, span=pp),
        etp=Group(eg.etp, eg.etp_rpn),
    )


def placement_of(cluster: ClusterSpec, group: Group, i: int = 0) -> Placement:
    """The footprint on ``cluster`` of layout ``i``'s ``group`` (nodes, ranks per node, network span)."""
    size = int(scalar(group.size, i))
    return contiguous_placement(cluster, size, min(int(scalar(group.ranks_per_node, i)), size))
