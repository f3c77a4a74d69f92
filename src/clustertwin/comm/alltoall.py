"""all_to_all as NCCL runs it (pairwise send/recv, PXN) and as DeepEP runs it (hierarchical), and the
expert-parallel dispatch/combine cost that a mixture-of-experts model asks for.

NCCL (``algorithm="direct"``): one kernel posts a send and a receive to each of the n peers, S/n bytes
each. Local peers go over the scale-up links, all at once: ``algbw_intra = B_a2a x n / (ppn - 1)``; remote
peers over the network, and an all-to-all cannot aggregate NICs, so each GPU is bound by one NIC's share
(``min(nic, node NICs / gpus)``; with PXN the message first crosses NVLink to the GPU on the destination's
rail, which is how the one-NIC-per-GPU share holds on rail-optimised fabrics): ``algbw_inter = N_gpu x n /
(n - ppn)``. Latency: launch + one step + one proxy post per remote peer (``net_overhead_us``, x3 Simple).

DeepEP V1 (``algorithm="deepep"``, normal kernels; ``"deepep_ll"``, low-latency kernels), for a rank with
payload ``b`` (tokens x hidden x bytes), top-k experts of E spread over R = N x g ranks:

* one node: every token goes to ``j_R = R (1 - (1 - 1/R)^k)`` distinct ranks over NVLink:
  ``t = b j_R / B_nvl``; DeepEP reports ``b j_R / t`` (its NVLink "bottleneck bandwidth");
* across nodes: a token goes to ``m = min(groups, N (1 - (1 - 1/N)^k))`` nodes (node-limited routing),
  once per node over RDMA (``b m (N-1)/N`` bytes leave the rank's NIC), then is forwarded over NVLink to
  ``j_g = g (1 - (1 - 1/g)^(k/m))`` local ranks (``b m j_g`` NVLink bytes); the two phases are chunked
  and pipelined (:func:`clustertwin.comm.hierarchical.compose`); DeepEP reports ``b m / t`` (RDMA bytes
  counting the rank's own node);
* low-latency: every (token, expert) message goes directly: the share ``g / R`` on NVLink, the rest on
  the NIC, ``t = launch + deepep_ll_overhead_us + max(local / B_nvl, remote / N_gpu)``; reported algbw
  ``b / t``.

Sources: DeepEP docs/legacy.md (V1 tables), DeepEP#51/#285 (bandwidth conventions), nccl-tests
doc/PERFORMANCE.md and NCCL's PXN notes (NVIDIA NCCL 2.12 release blog, "Doubling all2all performance").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from clustertwin.comm.candidate import Candidate, Ctx, inf_if, ring_protocol

DEEPSEEK_V3_TOP_K = 8
"""Experts per token (DeepSeek-V3), the default of the DeepEP candidates."""
DEEPSEEK_V3_EXPERTS = 256
"""Routed experts (DeepSeek-V3)."""
DEEPSEEK_V3_NODE_GROUPS = 4
"""Node-limited routing: a token reaches at most this many nodes (DeepSeek-V3 top-4 groups)."""
KERNELS = ("nccl", "deepep", "deepep_ll")


def distinct(targets: float, picks: float) -> float:
    """Expected distinct targets hit by ``picks`` uniform choices among ``targets``: T (1 - (1 - 1/T)^k)."""
    if targets <= 1:
        return 1.0
    return targets * (1.0 - (1.0 - 1.0 / targets) ** picks)


@dataclass(frozen=True)
class DeepEPVolumes:
    """Bytes per byte of a rank's payload that DeepEP normal kernels move, and what it reports."""

    nvlink: float
    """NVLink bytes (sent or received) per payload byte."""
    rdma: float
    """Bytes through the rank's NIC per payload byte."""
    reported: float
    """Bytes DeepEP's bottleneck bandwidth counts per payload byte."""


def deepep_volumes(nodes: int, gpus_per_node: int, top_k: float = DEEPSEEK_V3_TOP_K,
                   node_groups: int = DEEPSEEK_V3_NODE_GROUPS) -> DeepEPVolumes:
    """Traffic of DeepEP's normal dispatch (or combine, the reverse) per payload byte (module docstring)."""
    g = max(int(gpus_per_node), 1)
    if nodes <= 1:
        j = distinct(g, top_k)
        return DeepEPVolumes(j, 0.0, j)
    m = min(float(node_groups), distinct(nodes, top_k))
    jg = distinct(g, top_k / m)
    return DeepEPVolumes(m * jg, m * (nodes - 1) / nodes, m)


def candidates(cx: Ctx) -> list[Candidate]:
    """NCCL's pairwise all_to_all per protocol, plus DeepEP normal / low-latency (only when forced)."""
    from clustertwin.comm.result import busbw_factor

    n, ppn, nodes, lk, p, s = cx.n, cx.ppn, cx.nodes, cx.links, cx.p, cx.steps
    multi, local = nodes > 1, ppn > 1
    f = busbw_factor("all_to_all", n)
    peers_net = n - ppn if multi else 0
    out: list[Candidate] = []
    for proto in cx.protocols():
        mult, cap = ring_protocol(cx, proto, f)
        overhead = cx.net_overhead_us * (p.simple_net_overhead_factor if proto == "Simple" else 1.0)
        hop = cx.inter("ring", proto) if multi else cx.hw(lk.intra_hop, "ring", proto)
        tuner = cx.base("ring", proto) + hop + peers_net * overhead
        phys = s.launch_us + (s.net(proto) if multi else s.intra(proto)) + peers_net * overhead
        out.append(Candidate(
            "direct", proto, tuner, phys,
            lk.intra_a2a_gb_per_s * mult * n / (ppn - 1) if local else math.inf,
            inf_if(multi, lk.gpu_net_gb_per_s * mult * n / max(n - ppn, 1)), cap))
    return out + deepep_candidates(cx)


def deepep_candidates(cx: Ctx, top_k: float = DEEPSEEK_V3_TOP_K,
                      node_groups: int = DEEPSEEK_V3_NODE_GROUPS) -> list[Candidate]:
    """DeepEP normal (``deepep``) and low-latency (``deepep_ll``) kernels for one MoE routing shape."""
    n, ppn, nodes, lk, p, s = cx.n, cx.ppn, cx.nodes, cx.links, cx.p, cx.steps
    multi, local = nodes > 1, ppn > 1
    out: list[Candidate] = []
    vol = deepep_volumes(nodes, ppn, top_k, node_groups)
    nvl = lk.intra_a2a_gb_per_s
    lat = s.launch_us + s.intra("Simple") + (s.net("Simple") if multi else 0.0)
    out.append(Candidate(
        "deepep", "Simple", lat, lat, nvl / vol.nvlink if local else math.inf,
        lk.gpu_net_gb_per_s / vol.rdma if vol.rdma > 0 else math.inf, phased=True, default_on=False,
        report_factor=vol.reported))
    local_share = ppn / n
    ll_lat = s.launch_us + p.deepep_ll_overhead_us
    out.append(Candidate(
        "deepep_ll", "LL", ll_lat, ll_lat, nvl / local_share if local else math.inf,
        lk.gpu_net_gb_per_s / (1.0 - local_share) if multi else math.inf, default_on=False,
        report_factor=1.0))
    return out


__all__ = ["DeepEPVolumes", "deepep_candidates", "deepep_volumes", "distinct"]
