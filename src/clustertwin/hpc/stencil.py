"""Halo-exchange stencil model (weather dynamical cores, CFD): an explicit time step on a 3D grid split
into GPU sub-domains.

Decomposition: ``2d`` splits x and y over a ``px x py`` grid (columns stay whole, as weather models do),
``3d`` all three axes; each node holds a compact block of sub-domains. Without ``gpus`` the run uses the
most GPUs (within 3%, whole nodes) whose count splits into a near-square grid, as a user would
(:func:`clustertwin.hpc.grid.hpl_gpus`; 788 = 4 x 197 would make thin strips). Per step, per GPU with
``n = nx ny nz`` local points:

* compute: ``max(n x flops_per_point / (FP64 vector peak x vector_efficiency),
  n x bytes_per_point x 2 / (HBM GB/s x hbm_efficiency))`` - stencils run on the vector units and stream
  their state once in, once out, so most are memory-bound;
* halo: per split axis, both neighbours at once, ``send_recv`` of ``2 x halo_width x face points x
  halo_fields x 8 B`` (:func:`clustertwin.comm.collective`; inter-node where the axis leaves the node
  block, with the GPU's share of the node's NICs, since every GPU exchanges at the same time);
* step = compute + (1 - stencil_overlap) x halo; run time = steps x step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from clustertwin.comm import collective
from clustertwin.errors import SpecError
from clustertwin.hpc.grid import hpl_gpus
from clustertwin.hpc.params import DEFAULT_PARAMS, HPCParams
from clustertwin.hpc.rates import system_power_kw
from clustertwin.hpc.workloads import StencilSpec
from clustertwin.specs import ClusterSpec

FP64_BYTES = 8
READ_WRITE = 2


def _factor(n: int, dims: int, extents: tuple[int, ...]) -> tuple[int, ...]:
    """Split ``n`` ranks over ``dims`` axes minimising the halo surface for the given extents."""
    best: tuple[int, ...] | None = None
    best_surface = math.inf
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    combos: list[tuple[int, ...]] = [(a, n // a) for a in divisors] if dims == 2 else \
        [(a, b, n // (a * b)) for a in divisors for b in divisors if (n // a) % b == 0]
    for c in combos:
        local = [e / k for e, k in zip(extents, c, strict=False)]
        if min(local) < 1:
            continue
        surface = sum(math.prod(local[j] for j in range(dims) if j != i) for i in range(dims) if c[i] > 1)
        if surface < best_surface:
            best, best_surface = c, surface
    if best is None:
        raise SpecError(f"{n} GPUs cannot split the grid {extents} (fewer than one point per GPU)",
                        path=("grid",))
    return best


@dataclass(frozen=True)
class StencilResult:
    gpus: int
    decomposition: tuple[int, ...]
    step_s: float
    time_s: float
    tflops: float
    power_kw: float
    bound: str
    breakdown: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"workload": "stencil", "gpus": self.gpus, "decomposition": "x".join(map(str, self.decomposition)),
                "step_s": self.step_s, "time_s": self.time_s, "achieved_tflops": self.tflops,
                "power_kw": self.power_kw, "bound": self.bound, "breakdown": dict(self.breakdown)}


def stencil(cluster: ClusterSpec, spec: StencilSpec | None = None,
            params: HPCParams = DEFAULT_PARAMS) -> StencilResult:
    """Predicted time per step and to solution of a halo-exchange stencil (module docstring)."""
    spec = spec or StencilSpec()
    gpus = spec.gpus or hpl_gpus(cluster.total_gpus, cluster.node.gpus)
    if gpus > cluster.total_gpus:
        raise SpecError(f"gpus={gpus} exceeds the cluster's {cluster.total_gpus} GPUs", path=("gpus",))
    gx, gy, gz = spec.grid
    split = (*_factor(gpus, 2, (gx, gy)), 1) if spec.decomposition == "2d" else _factor(gpus, 3, (gx, gy, gz))
    local = (gx / split[0], gy / split[1], gz / split[2])
    points = math.prod(local)
    gpu = cluster.node.gpu
    if not gpu.fp64_tflops:
        raise SpecError(f"GPU '{gpu.id or gpu.name}' has no FP64 vector peak in the catalog")
    need = points * spec.bytes_per_point * READ_WRITE
    if need > gpu.hbm_bytes:
        raise SpecError(f"{need / 1e9:,.0f} GB of state per GPU exceeds the {gpu.hbm_gb:,.0f} GB of a "
                        f"{gpu.id}: use more GPUs or a smaller grid", path=("grid",))
    compute_s = points * spec.flops_per_point / (gpu.fp64_tflops * 1e12 * params.vector_efficiency)
    memory_s = points * spec.bytes_per_point * READ_WRITE / (gpu.hbm_gb_per_s * 1e9 * params.hbm_efficiency)
    # node block: GPUs of a node take consecutive ranks along x first
    per_node = min(gpus, cluster.node.gpus)
    block_x = math.gcd(per_node, split[0])
    halo_s = 0.0
    axes: dict[str, dict[str, Any]] = {}
    for axis, k in enumerate(split):
        if k == 1:
            continue
        others = [local[i] for i in range(3) if i != axis]
        face_bytes = spec.halo_width * others[0] * others[1] * spec.halo_fields * FP64_BYTES
        inter = gpus > cluster.node.gpus and not (axis == 0 and block_x == split[0])
        res = collective(cluster, "send_recv", 2.0 * face_bytes, 2, ranks_per_node=1 if inter else 2)
        halo_s += float(res.time_s)
        axes["xyz"[axis]] = {"face_bytes": face_bytes, "inter_node": inter, "time_s": float(res.time_s)}
    step_s = max(compute_s, memory_s) + (1.0 - params.stencil_overlap) * halo_s
    tflops = gpus * points * spec.flops_per_point / step_s / 1e12
    power, parts = system_power_kw(cluster.node, -(-gpus // cluster.node.gpus), gpus, gpu.tdp_w, params)
    bound = "halo exchange" if halo_s > max(compute_s, memory_s) else (
        "memory bandwidth" if memory_s >= compute_s else "FP64 compute")
    return StencilResult(gpus=gpus, decomposition=split, step_s=step_s, time_s=step_s * spec.time_steps,
                         tflops=tflops, power_kw=power, bound=bound, breakdown={
                             "local_grid": [round(x, 1) for x in local], "points_per_gpu": points,
                             "compute_s": compute_s, "memory_s": memory_s, "halo_s": halo_s, "axes": axes,
                             "state_gb_per_gpu": need / 1e9, "power_basis": "devices at TDP (upper bound)",
                             **parts})
