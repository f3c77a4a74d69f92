"""One picture of the path for one training workload on one cluster: storage -> network -> HBM/compute ->
collectives -> scheduler, each stage's capacity and demand, and the bottleneck named with numbers.

Composition only (no new physics): the step time and its breakdown come from :func:`clustertwin.train.
search` (best layout) or :func:`clustertwin.train.estimate`; the data stall from
:func:`clustertwin.datapath.data_stall`; the DP ring bandwidth of the job's placement from
:func:`clustertwin.topology.group_bandwidth`. Each stage reports ``capacity`` and ``demand`` in the same
unit and the seconds per step it costs; the bottleneck is the stage that costs the most time beyond
compute (data stall, exposed communication, pipeline bubble), or compute when none costs more than
:data:`NEGLIGIBLE_FRACTION` of the step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from clustertwin import topology
from clustertwin.datapath import DatasetSpec, data_stall, dataset
from clustertwin.errors import SpecError
from clustertwin.specs import ClusterSpec, ModelSpec, ParallelismSpec
from clustertwin.train.breakdown import TERM_GROUP
from clustertwin.units import GB, GIB

NEGLIGIBLE_FRACTION = 0.05
"""A stage costing less than 5% of the step is not called a bottleneck."""
COMM_KEYS = tuple(k for k, g in TERM_GROUP.items() if g == "communication")
"""Communication terms of the step breakdown (from ``StepBreakdown``'s own term groups)."""
SCALE_OUT_KEYS = ("dp_comm", "zero3_gather", "pp_comm")
"""Exposed DP synchronisation and pipeline send/recv (between nodes): charged to the network stage; the
other terms (TP/CP/EP, bubble) to collectives."""


@dataclass(frozen=True)
class PathStage:
    name: str
    capacity: float
    demand: float
    unit: str
    cost_s: float
    """Seconds per step this stage adds beyond compute (0 for compute itself: its share is ``compute_s``)."""
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "capacity": _num(self.capacity), "demand": _num(self.demand),
                "unit": self.unit, "cost_s": self.cost_s, "detail": self.detail}


def _num(x: float) -> float | None:
    return x if math.isfinite(x) else None


@dataclass(frozen=True)
class Explanation:
    cluster: str
    model: str
    gpus: int
    layout: dict[str, Any]
    step_time_s: float
    """Train-model step time plus the exposed data stall."""
    tokens_per_s: float
    stages: tuple[PathStage, ...]
    bottleneck: str
    verdict: str
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "model": self.model, "gpus": self.gpus, "layout": self.layout,
                "step_time_s": self.step_time_s, "tokens_per_s": self.tokens_per_s,
                "stages": [s.to_dict() for s in self.stages], "bottleneck": self.bottleneck,
                "verdict": self.verdict, "notes": self.notes}


def explain(model: ModelSpec, cluster: ClusterSpec, *, global_batch: int, gpus: int | None = None,
            parallelism: ParallelismSpec | None = None, data: DatasetSpec | str = "tokenized-text",
            placement: str = "contiguous", precision: str = "bf16") -> Explanation:
    """Walk the path for ``model`` on ``cluster`` (module docstring). Without ``parallelism`` the best
    layout of the layout search is used."""
    from clustertwin import train

    g = gpus or cluster.total_gpus
    if parallelism is None:
        res = train.search(model, cluster, global_batch=global_batch, gpus=g, precision=precision, top=1,
                           placement=placement, dataset=data)
        if not res.top:
            raise SpecError(f"no layout of {g} GPUs fits {model.name or model.id} at global batch {global_batch}")
        est = res.top[0]
    else:
        est = train.estimate(model, cluster, parallelism, placement=placement, dataset=data)
    bd = est.breakdown
    t = est.step_time_s - bd.get("data_stall", 0.0)  # the train model's step includes the data stall
    ds = dataset(data)
    stall = data_stall(cluster, ds, t, est.global_batch, est.gpus, seq_len=est.seq_len)
    stages = [_storage_stage(stall)]
    stages.append(_network_stage(cluster, model, est, placement))
    stages.append(_memory_stage(cluster, est))
    stages.append(_compute_stage(cluster, est))
    comm_s = sum(bd.get(k, 0.0) for k in COMM_KEYS if k not in SCALE_OUT_KEYS) + bd.get("bubble", 0.0)
    parts = [f"{k} {bd[k]:.3g} s" for k in (*COMM_KEYS, "bubble") if k not in SCALE_OUT_KEYS and bd.get(k, 0) > 0]
    stages.append(PathStage("collectives", t, comm_s, "s per step", comm_s,
                            "exposed TP/CP/EP/PP communication and pipeline bubble: " + (", ".join(parts) or "none")))
    stages.append(_scheduler_stage(cluster, est, placement))
    total = t + stall.stall_s
    costly = max(stages, key=lambda s: s.cost_s)
    if not est.fits:  # the HBM stage's cost is infinite: say what does not fit instead of "inf s (inf%)"
        bottleneck = "HBM"
        verdict = (f"HBM binds: the layout does not fit, {est.memory_gib_per_gpu:.1f} GiB per GPU of "
                   f"{cluster.node.gpu.hbm_bytes / GIB:.1f} GiB; choose more model parallelism, recompute or ZeRO")
    elif costly.cost_s > NEGLIGIBLE_FRACTION * total:
        bottleneck = costly.name
        verdict = (f"{costly.name} binds: it costs {costly.cost_s:.3g} s of the {total:.3g} s step "
                   f"({costly.cost_s / total:.0%}); {costly.detail}")
    else:
        bottleneck = "compute"
        verdict = (f"compute binds: {bd.get('compute', 0.0):.3g} s of the {total:.3g} s step at "
                   f"MFU {est.mfu:.1%}; no other stage costs more than {NEGLIGIBLE_FRACTION:.0%}")
    tokens = est.global_batch * est.seq_len / total
    return Explanation(cluster=cluster.name or cluster.id or "cluster", model=model.name or model.id or "model",
                       gpus=est.gpus, layout=est.layout, step_time_s=total, tokens_per_s=tokens,
                       stages=tuple(stages), bottleneck=bottleneck, verdict=verdict, notes=list(cluster.warnings))


def _storage_stage(stall) -> PathStage:
    return PathStage("storage", stall.delivered_gb_per_s, stall.demand_gb_per_s, "GB/s", stall.stall_s,
                     f"data path bound by {stall.bottleneck} ({stall.stage(stall.bottleneck).formula}); "
                     f"stall {stall.stall_s:.3g} s per step")


def _network_stage(cluster: ClusterSpec, model: ModelSpec, est, placement: str) -> PathStage:
    """Per-node bandwidth the DP x CP gradient rings get on this placement (every ring at once, each with the
    estimate's own group shape: :func:`clustertwin.train.placement.groups`, nodes per ring and node stride
    from :func:`clustertwin.train.topology_comm.node_shape`) vs the rate that would move one step's gradients
    within the compute time: ``2 x grad_bytes x gpus_per_node / (tp pp) / compute_s`` (ring all-reduce moves
    ~2x the buffer; bf16 gradients, 2 B per parameter)."""
    from clustertwin.train import param_count
    from clustertwin.train.layout import Layouts
    from clustertwin.train.placement import groups
    from clustertwin.train.topology_comm import node_shape

    topo = topology.build(cluster)
    gpn = cluster.node.gpus
    nodes = math.ceil(est.gpus / gpn)
    lay = est.layout
    if nodes <= 1:
        return PathStage("network", topo.injection_gb_per_s, 0.0, "GB/s per node", 0.0, "one node: no scale-out")
    tp, pp = int(lay["tp"]), int(lay["pp"])
    dp = groups(Layouts(tp, pp, int(lay["dp"]), int(lay["cp"]), int(lay["ep"]), 1, 1, 0, 0, 0,
                        etp=int(lay.get("etp") or 0)), gpn).dp
    m, stride = node_shape(int(dp.size), int(dp.stride), gpn)
    if m <= 1 or nodes % (m * stride):  # inside a node, or a ragged shape: the whole job as one ring
        m, stride = nodes, 1
    placed = topology.place(topo, nodes, placement)
    r = topology.group_bandwidth(topo, topology.groups_of(placed, m, stride), "ring")
    grad_bytes_per_gpu = 2.0 * float(param_count(model)) / (tp * pp)
    compute_s = est.breakdown.get("compute", 0.0) or est.step_time_s
    demand = 2.0 * grad_bytes_per_gpu * gpn / compute_s / GB
    cost = sum(est.breakdown.get(k, 0.0) for k in SCALE_OUT_KEYS)
    rings = nodes // m if m else 1
    return PathStage("network", r.per_node_gb_per_s, demand, "GB/s per node", cost,
                     f"{rings} x DP rings of {m} nodes ({placement}) get {r.fraction:.0%} of "
                     f"{topo.injection_gb_per_s:g} GB/s injection, bound by {r.bottleneck}, "
                     f"switch hops per ring edge {r.mean_hops:.2g} (max {r.max_hops}); each GPU syncs "
                     f"{grad_bytes_per_gpu / GB:.3g} GB of gradients (1/(tp x pp) of the model); exposed DP sync "
                     f"and PP transfers {cost:.3g} s")


def _memory_stage(cluster: ClusterSpec, est) -> PathStage:
    hbm = cluster.node.gpu.hbm_bytes / GIB
    return PathStage("HBM", hbm, est.memory_gib_per_gpu, "GiB per GPU", 0.0 if est.fits else math.inf,
                     f"{est.memory_gib_per_gpu:.1f} of {hbm:.1f} GiB per GPU" + ("" if est.fits else " (does not fit)"))


def _compute_stage(cluster: ClusterSpec, est) -> PathStage:
    peak = cluster.node.gpu.peak_tflops(est.precision) or 0.0
    return PathStage("compute", peak, est.model_tflops_per_gpu, "TFLOP/s per GPU", 0.0,
                     f"MFU {est.mfu:.1%}: compute {est.breakdown.get('compute', 0.0):.3g} s per step")


def _scheduler_stage(cluster: ClusterSpec, est, placement: str) -> PathStage:
    nodes = math.ceil(est.gpus / cluster.node.gpus)
    return PathStage("scheduler", cluster.nodes, nodes, "nodes", 0.0,
                     f"job takes {nodes} of {cluster.nodes} nodes, placed {placement}")
