"""Expert-parallel layout: EP, expert-TP (ETP) and expert-DP folded over the dense ranks (Megatron-Core
MoE parallel folding, Liu et al. 2025, arXiv 2504.14960).

The attention part of a layer runs on ``tp x cp x dp`` ranks per pipeline stage; the expert part
re-folds the same ranks as ``etp x ep x edp``:

    edp = tp cp dp / (etp ep)          (must be a whole number >= 1)

so EP may exceed dp x cp (EP32 over DP16 x TP2 with ETP1) and ETP may differ from TP (default ETP = TP).
**Rank order** of the expert groups (Megatron-Core ``tp-ep-dp-pp`` for experts, fastest first): the ETP
ranks are adjacent, EP ranks are ``etp`` apart, expert-DP ranks ``etp ep`` apart, so an EP group keeps
``min(ep, gpus_per_node / etp)`` ranks inside each node: EP8 with ETP1 stays in one 8-GPU node, EP64 spans
8 nodes with 8 ranks each, EP8 with ETP2 spans 2 nodes.

Tokens: every dense rank holds ``T / tp`` tokens of the micro-batch after TP (sequence parallelism) and CP
(``T = mbs s / cp``); they are dispatched to the ``ep`` ranks of the EP group and all-gathered over ETP, so a
rank's local experts see ``T/tp x etp x ep x top_k / experts`` tokens each and its expert FLOPs equal
``T/tp x top_k`` tokens' worth whatever the folding (the width is split over ETP).
"""

from __future__ import annotations

from dataclasses import dataclass

from clustertwin.train.layout import fmax, where


@dataclass
class ExpertGroups:
    """The expert-parallel groups of a layout (sizes and ranks per node; ints or arrays)."""

    etp: object
    ep: object
    edp: object
    etp_rpn: object
    ep_rpn: object
    edp_rpn: object

    @property
    def ep_stride(self) -> object:
        """EP ranks are ``etp`` apart (module docstring)."""
        return self.etp

    @property
    def edp_stride(self) -> object:
        """Expert-DP ranks are ``etp ep`` apart."""
        return self.etp * self.ep


def expert_tp(lay):
    """ETP of each layout: the given degree, or TP (``etp`` = 0)."""
    return where(lay.etp > 0, lay.etp, lay.tp)


def expert_groups(lay, gpus_per_node: int, ranks_per_node) -> ExpertGroups:
    """ETP, EP and expert-DP groups with their members per node (module docstring)."""
    etp = expert_tp(lay)
    ep = lay.ep
    dense = lay.tp * lay.cp * lay.dp
    edp = fmax(dense // fmax(etp * ep, 1), 1)
    return ExpertGroups(etp=etp, ep=ep, edp=edp, etp_rpn=ranks_per_node(etp, 1, gpus_per_node),
                        ep_rpn=ranks_per_node(ep, etp, gpus_per_node),
                        edp_rpn=ranks_per_node(edp, etp * ep, gpus_per_node))


def folding_valid(lay, experts: int):
    """EP divides the experts, ETP x EP divides the dense ranks tp x cp x dp (Megatron-Core's check)."""
    etp = expert_tp(lay)
    dense = lay.tp * lay.cp * lay.dp
    return (experts % lay.ep == 0) & (dense % (etp * lay.ep) == 0)
