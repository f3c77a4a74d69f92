"""HPL (High-Performance Linpack) time model: right-looking blocked LU with look-ahead on a P x Q grid.

For each of the ``N / NB`` panel steps ``k`` (``m = N - k NB`` rows left, ``t = m - NB`` trailing):

* trailing update (DGEMM on every GPU): ``t_upd = 2 NB t^2 / (P Q R)``, ``R`` the device DGEMM rate
  (:func:`clustertwin.hpc.rates.device_rate`);
* panel factorisation on one process column: ``t_fact = (m/P) NB^2 / (R x panel_efficiency) + NB x
  t_pivot``, ``t_pivot`` one tiny all_reduce (max-loc) over the P ranks of the column;
* panel broadcast along each process row: ``broadcast`` of ``(m/P) NB x 8`` bytes over Q ranks;
* row swaps / U spread down each column: ``all_gather`` of ``NB (t/Q) x 8`` bytes over P ranks.

Collective times come from :func:`clustertwin.comm.collective` (all rows/columns communicate at once, so
each gets its share of the node's NICs). With look-ahead the next panel's factorisation and broadcast run
under the current update, while the swaps sit on the update's path:
``t_step = max(t_upd + t_swap, t_fact + t_bcast)``. ``Rmax = (2/3 N^3 + 2 N^2) / (sum t_step /
runtime_efficiency)`` (the HPL FLOP count). Overheads therefore grow where ``N`` is small per GPU, NB
large, the grid long in one direction or the network slow - the physics of HPL efficiency, with one
device term (the DGEMM rate) and four global parameters (:mod:`.params`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from clustertwin.comm import collective
from clustertwin.errors import SpecError
from clustertwin.hpc.grid import Grid, grid, hpl_gpus
from clustertwin.hpc.params import DEFAULT_PARAMS, HPCParams
from clustertwin.hpc.rates import TFLOPS_PER_PFLOPS, DeviceRate, device_rate, rpeak_pflops, system_power_kw
from clustertwin.hpc.workloads import HPLSpec
from clustertwin.specs import ClusterSpec

FP64_BYTES = 8
PIVOT_BYTES = 16.0
"""Max-loc reduction payload per pivot (value + index)."""


def hpl_flops(n: int) -> float:
    """HPL's official operation count ``2/3 N^3 + 2 N^2``."""
    return 2.0 / 3.0 * n**3 + 2.0 * n**2


def default_n(cluster: ClusterSpec, gpus: int, nb: int, params: HPCParams = DEFAULT_PARAMS) -> int:
    """Largest multiple of NB with ``8 N^2 <= memory_fraction x gpus x device memory``."""
    n = math.isqrt(int(params.memory_fraction * gpus * cluster.node.gpu.hbm_bytes / FP64_BYTES))
    return max(nb, n // nb * nb)


@dataclass(frozen=True)
class HPLResult:
    """Predicted HPL run (the keys of TOP500 and Green500 entries, with the breakdown)."""

    n: int
    nb: int
    p: int
    q: int
    gpus: int
    nodes: int
    rpeak_pflops: float
    rmax_pflops: float
    time_s: float
    power_kw: float
    device: DeviceRate
    breakdown: dict[str, Any] = field(default_factory=dict)

    @property
    def efficiency(self) -> float:
        """Rmax / Rpeak."""
        return self.rmax_pflops / self.rpeak_pflops

    @property
    def gflops_per_w(self) -> float:
        """Rmax / power (the Green500 metric), GFLOP/s per W."""
        return self.rmax_pflops * 1e6 / (self.power_kw * 1e3)

    def to_dict(self) -> dict[str, Any]:
        d = self.device
        return {
            "workload": "hpl", "n": self.n, "nb": self.nb, "p": self.p, "q": self.q, "gpus": self.gpus,
            "nodes": self.nodes, "rpeak_pflops": self.rpeak_pflops, "rmax_pflops": self.rmax_pflops,
            "rmax_over_rpeak": self.efficiency, "time_s": self.time_s, "power_kw": self.power_kw,
            "gflops_per_w": self.gflops_per_w,
            "device": {"fp64_gemm_peak_tflops": d.peak_tflops, "dgemm_tflops": d.dgemm_tflops,
                       "compute_bound_tflops": d.compute_bound_tflops,
                       "power_bound_tflops": d.power_bound_tflops, "limited_by": d.limited_by,
                       "power_w": d.power_w},
            "breakdown": dict(self.breakdown),
        }


def _times(cluster: ClusterSpec, g: Grid, op: str, nbytes: np.ndarray, ranks: int, per_node: int) -> np.ndarray:
    if ranks <= 1:
        return np.zeros_like(nbytes)
    res = collective(cluster, op, np.maximum(nbytes, 0.0), ranks, ranks_per_node=per_node)
    return np.asarray(res.time_s, dtype=float)


def hpl(cluster: ClusterSpec, spec: HPLSpec | None = None, params: HPCParams = DEFAULT_PARAMS) -> HPLResult:
    """Predicted Rmax, Rpeak, time and power of HPL on ``cluster`` (formulas in the module docstring)."""
    spec = spec or HPLSpec()
    listed = spec.gpus or cluster.total_gpus
    if listed > cluster.total_gpus:
        raise SpecError(f"gpus={listed} exceeds the cluster's {cluster.total_gpus} GPUs", path=("gpus",))
    nodes = -(-listed // cluster.node.gpus)
    gpus = listed
    if spec.p is None and spec.q is None:
        gpus = hpl_gpus(listed, cluster.node.gpus)
    elif (spec.p or 1) * (spec.q or 1) > listed:
        raise SpecError(f"P x Q exceeds the {listed} GPUs", path=("p",))
    elif spec.p and spec.q:
        gpus = spec.p * spec.q
    g = grid(gpus, cluster.node.gpus, spec.p, spec.q)
    nb = spec.nb or params.default_nb
    n = spec.n or default_n(cluster, gpus, nb, params)
    need = FP64_BYTES * n * n / gpus
    if need > cluster.node.gpu.hbm_bytes:
        raise SpecError(f"N={n} needs {need / 1e9:,.0f} GB per GPU; the GPU has {cluster.node.gpu.hbm_gb:,.0f} GB",
                        path=("n",))
    dev = device_rate(cluster.node.gpu, params)
    rate = dev.dgemm_tflops * 1e12
    steps = -(-n // nb)
    m = n - nb * np.arange(steps, dtype=float)
    trail = np.maximum(m - nb, 0.0)
    t_upd = 2.0 * nb * trail**2 / (gpus * rate)
    pivot = _times(cluster, g, "all_reduce", np.array([PIVOT_BYTES]), g.p, g.p_local)[0]
    t_fact = (m / g.p) * nb * nb / (rate * params.panel_efficiency) + nb * pivot
    t_bcast = _times(cluster, g, "broadcast", (m / g.p) * nb * FP64_BYTES, g.q, g.q_local)
    t_swap = _times(cluster, g, "all_gather", nb * (trail / g.q) * FP64_BYTES, g.p, g.p_local)
    t_step = np.maximum(t_upd + t_swap, t_fact + t_bcast)
    loop_s = float(t_step.sum())
    time_s = loop_s / params.runtime_efficiency
    rmax = hpl_flops(n) / time_s / 1e15
    rpeak, rparts = rpeak_pflops(cluster.node, nodes, listed)
    power, pparts = system_power_kw(cluster.node, nodes, listed, dev.power_w, params)
    critical = t_fact + t_bcast > t_upd + t_swap
    breakdown = {
        "update_s": float(t_upd.sum()), "swap_s": float(t_swap.sum()), "panel_factorisation_s": float(t_fact.sum()),
        "panel_broadcast_s": float(t_bcast.sum()), "pivot_all_reduce_us": pivot * 1e6,
        "exposed_panel_and_broadcast_s": float(np.where(critical, t_fact + t_bcast - t_upd - t_swap, 0.0).sum()),
        "steps": steps, "steps_panel_bound": int(critical.sum()), "gpus_in_grid": gpus,
        "runtime_efficiency": params.runtime_efficiency, "grid_local": f"{g.p_local}x{g.q_local}",
        "dgemm_share_of_time": float(t_upd.sum()) / time_s,
        "memory_per_gpu_gb": need / 1e9, **rparts, **pparts,
        "rmax_tflops_per_gpu": rmax * TFLOPS_PER_PFLOPS / listed,
    }
    return HPLResult(n=n, nb=nb, p=g.p, q=g.q, gpus=listed, nodes=nodes, rpeak_pflops=rpeak, rmax_pflops=rmax,
                     time_s=time_s, power_kw=power, device=dev, breakdown=breakdown)
