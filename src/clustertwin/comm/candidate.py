"""What an NCCL candidate is and the context it is built in: :class:`Candidate` (one algorithm/protocol
option with its tuner latency, physical latency and per-link bandwidths) and :class:`Ctx` (everything the
candidates of one cluster, op and group need), shared by :mod:`.algorithms` (NCCL's collectives) and
:mod:`.alltoall` (all_to_all and DeepEP), which build candidates, and :mod:`.evaluate`, which times them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from clustertwin.comm import constants as C
from clustertwin.comm.latency import StepLatency
from clustertwin.comm.links import Links
from clustertwin.comm.nccl_version import CURRENT_VERSION
from clustertwin.comm.params import CommParams
from clustertwin.comm.placement import Placement
from clustertwin.comm.span import GroupSpan
from clustertwin.specs.cluster import ClusterSpec


@dataclass(frozen=True)
class Candidate:
    """One (algorithm, protocol) option: tuner latency, physical latency (µs) and per-link algbw (GB/s)."""

    algorithm: str
    protocol: str
    tuner_us: float
    latency_us: float
    intra_algbw: float
    inter_algbw: float
    cap_algbw: float = math.inf
    phased: bool = False
    depth: int = 0
    """Pipeline stages a chunk crosses (NVLS 2, NVLSTree 2 + 2 log2 nodes, CollNet and NVLS across nodes
    4); a multi-stage pipeline (depth >= 2) pays the pipeline fill
    (:func:`clustertwin.comm.hierarchical.fill_s`, and for NVLS/NVLSTree at least
    :func:`~clustertwin.comm.hierarchical.nvls_fill_s`). 0: no such fill (rings, point-to-point, trees,
    which fill through ``chain``)."""
    nvls_ops: int = 0
    """NVLS / NVLSTree: concurrent operations ``channels x heads`` (the loop of
    :func:`clustertwin.comm.hierarchical.nvls_fill_s`). 0: neither."""
    chain: int = 0
    """Store-and-forward stages of whole Simple steps (tree Simple: its depth; NCCL 2.x trees move
    ``chunkSteps = sliceSteps = 1`` steps of NCCL_BUFFSIZE / NCCL_STEPS, enqueue.cc ``calcCollChunking``),
    priced by :func:`clustertwin.comm.hierarchical.chain_fill_s`. 0: none."""
    tuner_intra_only: bool = False
    tree_correction: bool = False
    plateau: bool = False
    default_on: bool = True
    report_factor: float | None = None
    """busbw = algbw x this instead of nccl-tests' factor (DeepEP's bottleneck-bandwidth convention)."""
    p2p: tuple[int, int, float, float] | None = None
    """Send/recv on an NVSwitch node: (nChannelsMin, nChannelsMax, step bytes, GB/s per channel); the
    size-dependent channel count of :func:`clustertwin.comm.p2p.p2p_channels` caps the bandwidth."""


@dataclass(frozen=True)
class Ctx:
    """Everything the candidates of one (cluster, op, group) need, computed once."""

    cluster: ClusterSpec
    op: str
    n: int
    ppn: int
    nodes: int
    span: GroupSpan
    links: Links
    p: CommParams
    placement: Placement
    gen: str
    ll128: bool
    sharp: bool
    nvls: bool
    ll_max: float
    net_overhead_us: float
    net_extra_us: float
    steps: StepLatency
    symmetric: bool = False
    version: tuple[int, int, int] = CURRENT_VERSION

    # ---- NCCL tuner table (selection only)
    def hw(self, hop: str, algo: str, proto: str) -> float:
        return C.HW_LATENCY_US[hop][algo][proto]

    def base(self, algo: str, proto: str) -> float:
        return C.BASE_LATENCY_US[algo][proto]

    def inter(self, algo: str, proto: str) -> float:
        """Tuner network step: NCCL's table plus the fabric's excess hop latency (twice for Simple)."""
        extra = self.net_extra_us * (2.0 if proto == "Simple" else 1.0)
        return self.hw(C.NET, algo, proto) + extra

    def protocols(self) -> tuple[str, ...]:
        return C.PROTOCOLS if self.ll128 else ("LL", "Simple")



def ring_protocol(cx: Ctx, proto: str, factor: float) -> tuple[float, float]:
    """(bandwidth multiplier, algbw cap) of a ring-like protocol: LL x0.5 capped at llMax busbw,
    LL128 x0.92 capped at channels x per-channel LL128 busbw, Simple x1."""
    if proto == "LL":
        return cx.p.ll_bw_factor, cx.ll_max / factor
    if proto == "LL128":
        return cx.p.ll128_bw_factor, cx.p.channels * C.PER_CHANNEL_RING_LL128_GB_PER_S[cx.gen] / factor
    return 1.0, math.inf


def inf_if(cond: bool, value: float) -> float:
    return value if cond else math.inf
