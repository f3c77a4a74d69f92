"""Parallel groups of a layout: the one owner of their sizes and of where their ranks sit.

Sizes: TP ``tp``, CP ``cp``, the dense gradient group DP x CP, EP ``ep`` (experts split inside DP x CP),
expert-TP = TP, expert-DP ``dp cp / ep``, PP ``pp`` (a send/recv pair between neighbouring stages).

Ranks per node follow Megatron's rank order (TP fastest, then CP and DP, then PP): a group whose members
are ``stride`` ranks apart holds ``min(size, gpus_per_node / stride)`` of them on one node. TP is
assumed inside a node; the pipeline pair shares a node when two whole TP x CP x DP replicas fit in one.
The collective model (:mod:`clustertwin.comm`, via :mod:`clustertwin.train.collectives`) is asked for
each group with its size and ranks per node; :func:`placement_of` describes a group's footprint
(nodes, leaves, pods crossed) with :func:`clustertwin.comm.placement.contiguous_placement`.
"""

from __future__ import annotations

from dataclasses import dataclass

from clustertwin.comm.placement import Placement, contiguous_placement
from clustertwin.specs.cluster import ClusterSpec
from clustertwin.train.layout import Layouts, fmax, fmin, scalar, where


@dataclass
class Group:
    """One parallel group: members and members per node (ints or int arrays)."""

    size: object
    ranks_per_node: object


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
    """expert tensor parallelism (= TP)"""


def groups(lay: Layouts, gpus_per_node: int) -> Groups:
    """Sizes and ranks per node of every group of ``lay`` (vectorised)."""
    tp, cp, dp, ep = lay.tp, lay.cp, lay.dp, lay.ep
    inner_tp = fmax(gpus_per_node // tp, 1)
    dpcp = dp * cp
    rpn_dpcp = fmin(inner_tp, dpcp)
    edp = fmax(dpcp // ep, 1)
    has_pp = lay.pp > 1
    return Groups(
        tp=Group(tp, tp),
        cp=Group(cp, fmin(inner_tp, cp)),
        dp=Group(dpcp, rpn_dpcp),
        ep=Group(ep, fmin(inner_tp, ep)),
        edp=Group(edp, fmin(fmax(rpn_dpcp // fmin(ep, rpn_dpcp), 1), edp)),
        pp=Group(where(has_pp, 2, 1), where(tp * cp * dp * 2 <= gpus_per_node, 2, 1)),
        etp=Group(tp, tp),
    )


def placement_of(cluster: ClusterSpec, group: Group, i: int = 0) -> Placement:
    """The footprint on ``cluster`` of layout ``i``'s ``group`` (nodes, ranks per node, network span)."""
    size = int(scalar(group.size, i))
    return contiguous_placement(cluster, size, min(int(scalar(group.ranks_per_node, i)), size))
