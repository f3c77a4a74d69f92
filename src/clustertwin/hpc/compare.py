"""``hpc compare``: the weather-bureau question - for one budget, which GPU type and count gives the most
FP64 work, per dollar and per watt, and why.

For every candidate node type (default: every catalog node with a price and FP64 units) the budget buys
``n`` nodes, the most whose hardware capex fits: ``nodes x node price + switches + transceivers + cables``
(:func:`clustertwin.facility.cost.capex` on the cluster's topology; storage and the facility build-out are
not in the budget). The workload then runs on that cluster (:func:`clustertwin.hpc.estimate.run`); rows are
ranked by FP64 work rate, and each says what limits it and how its price is known (list, street or
estimate) - a ranking that rests on estimated prices says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clustertwin import catalog, specs
from clustertwin.errors import SpecError
from clustertwin.facility.cost import COMPUTE_COMPONENT, ESTIMATE, FACILITY_COMPONENT
from clustertwin.hpc.estimate import WorkloadResult, run
from clustertwin.hpc.params import DEFAULT_PARAMS, HPCParams
from clustertwin.hpc.rates import device_rate
from clustertwin.hpc.workloads import WorkloadSpec
from clustertwin.plan import plan

EXCLUDED_FROM_BUDGET = (FACILITY_COMPONENT, "storage")
MAX_SIZING_ROUNDS = 8


def default_candidates() -> list[str]:
    """Catalog nodes with a price whose GPU has FP64 units (a part without FP64 cannot run the work)."""
    out = []
    for nid in catalog.ids("node"):
        node = catalog.get("node", nid)
        if node.price_usd is not None and node.gpu.gemm_peak_tflops("fp64"):
            out.append(nid)
    return out


@dataclass(frozen=True)
class CompareRow:
    node: str
    gpu: str
    nodes: int
    gpus: int
    spent_usd: float
    price_confidence: str
    estimated: tuple[str, ...]
    result: WorkloadResult
    reason: str

    @property
    def tflops_per_musd(self) -> float:
        return self.result.tflops / (self.spent_usd / 1e6)

    @property
    def gflops_per_w(self) -> float:
        return self.result.tflops * 1e3 / (self.result.power_kw * 1e3)

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "gpu": self.gpu, "nodes": self.nodes, "gpus": self.gpus,
                "spent_usd": self.spent_usd, "price_confidence": self.price_confidence,
                "estimated_prices": list(self.estimated), "fp64_tflops": self.result.tflops,
                "tflops_per_million_usd": self.tflops_per_musd, "power_kw": self.result.power_kw,
                "gflops_per_w": self.gflops_per_w, "time_s": self.result.time_s, "reason": self.reason,
                "workload": self.result.to_dict()}


@dataclass(frozen=True)
class CompareResult:
    workload: str
    budget_usd: float
    rows: tuple[CompareRow, ...]
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def any_estimate(self) -> bool:
        return any(r.estimated for r in self.rows)

    def ratio(self, a: str, b: str) -> float | None:
        """FP64 work of node ``a`` over node ``b`` at this budget (None if either is missing)."""
        rows = {r.node: r for r in self.rows}
        if a not in rows or b not in rows:
            return None
        return rows[a].result.tflops / rows[b].result.tflops

    def to_dict(self) -> dict[str, Any]:
        return {"workload": self.workload, "budget_usd": self.budget_usd,
                "ranking": [r.to_dict() for r in self.rows], "skipped": dict(self.skipped),
                "prices_include_estimates": self.any_estimate}


def _hardware_usd(cluster: specs.ClusterSpec) -> tuple[float, bool, tuple[str, ...], str]:
    p = plan(cluster)
    cost = p.facility.capex
    items = [i for i in cost.items if i.component not in EXCLUDED_FROM_BUDGET]
    usd = sum(i.usd or 0.0 for i in items)
    complete = all(i.usd is not None for i in items)
    est = tuple(i.component for i in items if i.usd and i.confidence == ESTIMATE)
    compute = next(i for i in items if i.component == COMPUTE_COMPONENT)
    return usd, complete, est, compute.confidence


def _size(node_id: str, budget_usd: float,
          fabric: str | None = None) -> tuple[specs.ClusterSpec, float, tuple[str, ...], str] | str:
    node = catalog.get("node", node_id)
    if node.price_usd is None:
        return "no price in the catalog"
    n = int(budget_usd // node.price_usd)
    for _ in range(MAX_SIZING_ROUNDS):
        if n < 1:
            return f"the budget buys no node (${node.price_usd:,.0f} each plus network)"
        data: dict[str, Any] = {"name": f"{node_id}x{n}", "node": node_id, "nodes": n}
        if fabric is not None:
            data["network"] = {"fabric": fabric}
        cluster = specs.build(specs.ClusterSpec, data)
        usd, complete, est, conf = _hardware_usd(cluster)
        if not complete:
            return "part of the network has no price"
        if usd <= budget_usd:
            return cluster, usd, est, conf
        n = min(n - 1, int(n * budget_usd / usd))
    return "could not fit the budget"


def _reason(row_gpu: Any, res: WorkloadResult, usd_per_gpu: float, conf: str) -> str:
    dev = device_rate(row_gpu)
    kind = "tensor" if row_gpu.fp64_tensor_tflops else "vector"
    price = f"${usd_per_gpu:,.0f}/GPU all-in ({conf})"
    if res.kind == "hpl":
        return (f"FP64 {dev.peak_tflops:g} TF {kind}; DGEMM {dev.dgemm_tflops:.1f} TF/GPU "
                f"({dev.limited_by}-bound); {price}")
    if res.kind == "hpcg":
        return f"HBM {row_gpu.hbm_gb_per_s / 1e3:.2f} TB/s (HPCG is memory-bound); {price}"
    d = res.detail
    return (f"{d.bound}-bound; FP64 vector {row_gpu.fp64_tflops:g} TF, HBM {row_gpu.hbm_gb_per_s / 1e3:.2f} TB/s; "
            f"{price}")


def compare(workload: WorkloadSpec, budget_usd: float, nodes: list[str] | None = None,
            params: HPCParams = DEFAULT_PARAMS, fabric: str | None = None) -> CompareResult:
    """Rank node types by the FP64 work ``workload`` gets from ``budget_usd`` (module docstring). The network
    is the cluster default (InfiniBand at the nodes' NIC rate, rail-optimised) unless ``fabric`` names a
    catalog fabric for every candidate."""
    if fabric is not None:
        catalog.get("fabric", fabric)  # unknown id -> one-line error with the nearest id
    if not budget_usd > 0:
        raise SpecError(f"budget must be > 0 USD (got {budget_usd})", path=("budget",))
    candidates = nodes or default_candidates()
    rows: list[CompareRow] = []
    skipped: dict[str, str] = {}
    for nid in candidates:
        node = catalog.get("node", nid)
        if not node.gpu.gemm_peak_tflops("fp64"):
            skipped[nid] = "GPU has no FP64 units"
            continue
        sized = _size(nid, budget_usd, fabric)
        if isinstance(sized, str):
            skipped[nid] = sized
            continue
        cluster, usd, est, conf = sized
        try:
            res = run(cluster, workload, params)
        except SpecError as e:
            skipped[nid] = str(e)
            continue
        gpus = cluster.total_gpus
        rows.append(CompareRow(node=nid, gpu=str(node.gpu.id), nodes=cluster.nodes, gpus=gpus, spent_usd=usd,
                               price_confidence=conf, estimated=est, result=res,
                               reason=_reason(node.gpu, res, usd / gpus, conf)))
    rows.sort(key=lambda r: -r.result.tflops)
    return CompareResult(workload=workload.kind, budget_usd=budget_usd, rows=tuple(rows), skipped=skipped)
