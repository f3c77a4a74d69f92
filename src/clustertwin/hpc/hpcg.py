"""HPCG model: preconditioned CG on a 27-point 3D Poisson matrix, memory-bandwidth bound.

Per CG iteration on a local grid of ``n = nx ny nz`` points (HPCG reference counts): SpMV ``2 x 27 n``
FLOPs; the multigrid V-cycle over 4 levels (each 8x coarser) with a symmetric Gauss-Seidel pre- and
post-smoother (``2 x 2 x 27 n`` each) and a residual SpMV per level; two dot products and three
WAXPBYs (``10 n``). Every sparse sweep streams the matrix (8 B value + 4 B column index per non-zero per
2 FLOPs = 6 B/FLOP, ``HPCParams.hpcg_bytes_per_flop``), so

    t_iter = FLOPs x bytes_per_flop / (HBM GB/s x hbm_efficiency) + 3 x t_allreduce(8 B) + t_halo,

with the dot products' all_reduce and the 26-neighbour halo exchange of the fine level (6 faces of
``nx ny x 8 B``, one send_recv per face direction) from :func:`clustertwin.comm.collective`.
``HPCG GFLOP/s = FLOPs x GPUs / t_iter``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clustertwin.comm import collective
from clustertwin.errors import SpecError
from clustertwin.hpc.params import DEFAULT_PARAMS, HPCParams
from clustertwin.hpc.rates import system_power_kw
from clustertwin.hpc.workloads import HPCGSpec
from clustertwin.specs import ClusterSpec

STENCIL_POINTS = 27
MG_LEVELS = 4
COARSENING = 8.0
VECTOR_FLOPS_PER_POINT = 10.0
DOTS_PER_ITERATION = 3
FP64_BYTES = 8


def flops_per_iteration(points: float) -> float:
    """HPCG FLOPs of one CG iteration on ``points`` local points (module docstring)."""
    spmv = 2.0 * STENCIL_POINTS * points
    level = 2.0 * 2.0 * 2.0 * STENCIL_POINTS + 2.0 * STENCIL_POINTS  # pre + post SymGS + residual SpMV
    mg = sum(level * points / COARSENING**lv for lv in range(MG_LEVELS))
    return spmv + mg + VECTOR_FLOPS_PER_POINT * points


@dataclass(frozen=True)
class HPCGResult:
    gpus: int
    gflops: float
    time_per_iteration_s: float
    power_kw: float
    breakdown: dict[str, Any] = field(default_factory=dict)

    @property
    def pflops(self) -> float:
        return self.gflops / 1e6

    def to_dict(self) -> dict[str, Any]:
        return {"workload": "hpcg", "gpus": self.gpus, "hpcg_gflops": self.gflops, "hpcg_pflops": self.pflops,
                "time_per_iteration_s": self.time_per_iteration_s, "power_kw": self.power_kw,
                "gflops_per_w": self.gflops / (self.power_kw * 1e3), "breakdown": dict(self.breakdown)}


def hpcg(cluster: ClusterSpec, spec: HPCGSpec | None = None, params: HPCParams = DEFAULT_PARAMS) -> HPCGResult:
    """Predicted HPCG rate of ``cluster`` (formulas in the module docstring)."""
    spec = spec or HPCGSpec()
    gpus = spec.gpus or cluster.total_gpus
    if gpus > cluster.total_gpus:
        raise SpecError(f"gpus={gpus} exceeds the cluster's {cluster.total_gpus} GPUs", path=("gpus",))
    nx, ny, nz = spec.local_grid
    points = float(nx * ny * nz)
    flops = flops_per_iteration(points)
    gpu = cluster.node.gpu
    mem_s = flops * params.hpcg_bytes_per_flop / (gpu.hbm_gb_per_s * 1e9 * params.hbm_efficiency)
    dot_s = halo_s = 0.0
    if gpus > 1:
        per_node = min(gpus, cluster.node.gpus)
        dot_s = DOTS_PER_ITERATION * float(collective(cluster, "all_reduce", float(FP64_BYTES), gpus,
                                                      ranks_per_node=per_node).time_s)
        face = float(max(nx * ny, ny * nz, nx * nz) * FP64_BYTES)
        inter = gpus > cluster.node.gpus
        pair = collective(cluster, "send_recv", 2.0 * face, 2, ranks_per_node=1 if inter else 2)
        halo_s = 3 * float(pair.time_s)  # three face directions, both neighbours at once
    t_iter = mem_s + dot_s + halo_s
    gflops = flops * gpus / t_iter / 1e9
    power, parts = system_power_kw(cluster.node, -(-gpus // cluster.node.gpus), gpus, gpu.tdp_w, params)
    return HPCGResult(gpus=gpus, gflops=gflops, time_per_iteration_s=t_iter, power_kw=power, breakdown={
        "flops_per_iteration_per_gpu": flops, "memory_s": mem_s, "dot_all_reduce_s": dot_s, "halo_s": halo_s,
        "bytes_per_flop": params.hpcg_bytes_per_flop, "hbm_efficiency": params.hbm_efficiency,
        "share_of_fp64_peak": gflops / (gpus * (gpu.fp64_tflops or 1.0) * 1e3),
        "power_basis": "devices at TDP (upper bound)", **parts})
