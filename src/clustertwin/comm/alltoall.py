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
from typing import TYPE_CHECKING, Any

import numpy as np

from clustertwin.comm.hierarchical import compose

if TYPE_CHECKING:
    from clustertwin.comm.algorithms import Candidate, Ctx

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
    from clustertwin.comm.algorithms import Candidate, _inf_if, _ring_protocol
    from clustertwin.comm.result import busbw_factor

    n, ppn, nodes, lk, p, s = cx.n, cx.ppn, cx.nodes, cx.links, cx.p, cx.steps
    multi, local = nodes > 1, ppn > 1
    f = busbw_factor("all_to_all", n)
    peers_net = n - ppn if multi else 0
    out: list[Candidate] = []
    for proto in cx.protocols():
        mult, cap = _ring_protocol(cx, proto, f)
        overhead = cx.net_overhead_us * (p.simple_net_overhead_factor if proto == "Simple" else 1.0)
        hop = cx.inter("ring", proto) if multi else cx.hw(lk.intra_hop, "ring", proto)
        tuner = cx.base("ring", proto) + hop + peers_net * overhead
        phys = s.launch_us + (s.net(proto) if multi else s.intra(proto)) + peers_net * overhead
        out.append(Candidate(
            "direct", proto, tuner, phys,
            lk.intra_a2a_gb_per_s * mult * n / (ppn - 1) if local else math.inf,
            _inf_if(multi, lk.gpu_net_gb_per_s * mult * n / max(n - ppn, 1)), cap))
    return out + deepep_candidates(cx)


def deepep_candidates(cx: Ctx, top_k: float = DEEPSEEK_V3_TOP_K,
                      node_groups: int = DEEPSEEK_V3_NODE_GROUPS) -> list[Candidate]:
    """DeepEP normal (``deepep``) and low-latency (``deepep_ll``) kernels for one MoE routing shape."""
    from clustertwin.comm.algorithms import Candidate

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


@dataclass(frozen=True)
class ExpertAllToAll:
    """Cost of one expert-parallel dispatch or combine (arrays when ``tokens`` was an array)."""

    kernel: str
    phase: str
    ep: int
    time_s: Any
    payload_bytes: Any
    """Bytes of the rank's tokens (tokens x hidden x bytes per value)."""
    nvlink_bytes: Any
    """Bytes this rank moves over the scale-up links."""
    rdma_bytes: Any
    """Bytes through this rank's NIC."""
    busbw_gb_per_s: Any
    """The kernel's own reported bandwidth (nccl-tests busbw for nccl, DeepEP's bottleneck bandwidth)."""


def expert_all_to_all(cluster: Any, ep: int, tokens: float | np.ndarray, hidden: int, *,
                      phase: str = "dispatch", kernel: str = "deepep", top_k: int = DEEPSEEK_V3_TOP_K,
                      node_groups: int = DEEPSEEK_V3_NODE_GROUPS, bytes_per_value: float | None = None,
                      ranks_per_node: int | None = None, params: Any = None,
                      calibration: Any = None) -> ExpertAllToAll:
    """Time of an MoE dispatch (``phase="dispatch"``) or combine over ``ep`` expert-parallel ranks.

    ``tokens`` per rank (scalar or array), ``hidden`` size; ``bytes_per_value`` defaults to 1 for dispatch
    (FP8) and 2 for combine (BF16), as DeepSeek-V3 runs them. ``kernel``: ``"deepep"`` (normal,
    hierarchical NVLink + RDMA), ``"deepep_ll"`` (low latency, direct RDMA per (token, expert)) or
    ``"nccl"`` (an nccl all_to_all of the ``tokens x top_k x hidden`` routed bytes). ``top_k`` experts per
    token, at most ``node_groups`` nodes per token. The expert count does not enter: the routing is taken
    as uniform (balanced experts)."""
    from clustertwin.comm.model import collective
    from clustertwin.errors import SpecError, did_you_mean

    if kernel not in KERNELS:
        raise SpecError(f"unknown all-to-all kernel '{kernel}'{did_you_mean(kernel, KERNELS)} "
                        f"(one of: {', '.join(KERNELS)})")
    if phase not in ("dispatch", "combine"):
        raise SpecError(f"phase must be dispatch or combine (got '{phase}')")
    bpv = bytes_per_value if bytes_per_value is not None else (1.0 if phase == "dispatch" else 2.0)
    payload = np.asarray(tokens, dtype=float) * float(hidden) * bpv
    kw = {"ranks_per_node": ranks_per_node, "params": params, "calibration": calibration}
    if kernel == "nccl":
        res = collective(cluster, "all_to_all", payload * top_k, ep, **kw)
        ppn = res.ranks_per_node
        remote = (ep - ppn) / ep if res.nodes > 1 else 0.0
        routed = payload * top_k
        return ExpertAllToAll(kernel, phase, ep, res.time_s, payload, routed * (1 - remote), routed * remote,
                              res.busbw_gb_per_s)
    from clustertwin.comm.model import _params, _prepared, _resolve, evaluate

    n, ppn = _resolve(cluster, "all_to_all", ep, ranks_per_node)
    cx, _, _ = _prepared(cluster, "all_to_all", n, ppn, _params(params, calibration), None)
    cands = {c.algorithm: c for c in deepep_candidates(cx, top_k, node_groups)}
    if kernel == "deepep_ll":
        routed = payload * top_k
        res = evaluate(cx, [cands["deepep_ll"]], np.atleast_1d(routed).astype(float).reshape(-1))
        t = res.time_s.reshape(np.shape(routed))
        local = ppn / n
        return ExpertAllToAll(kernel, phase, n, _out(t), payload, routed * local, routed * (1 - local),
                              _out(res.busbw_gb_per_s.reshape(np.shape(routed))))
    res = evaluate(cx, [cands["deepep"]], np.atleast_1d(payload).astype(float).reshape(-1))
    vol = deepep_volumes(cx.nodes, ppn, top_k, node_groups)
    return ExpertAllToAll(kernel, phase, n, _out(res.time_s.reshape(np.shape(payload))), payload,
                          payload * vol.nvlink, payload * vol.rdma,
                          _out(res.busbw_gb_per_s.reshape(np.shape(payload))))


def _out(v: np.ndarray) -> Any:
    return float(v) if np.ndim(v) == 0 else v


__all__ = ["DeepEPVolumes", "ExpertAllToAll", "compose", "deepep_volumes", "distinct", "expert_all_to_all"]
