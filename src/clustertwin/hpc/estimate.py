"""One entry point for every science workload: ``run(cluster, workload) -> WorkloadResult`` with the FP64
work rate that ``hpc compare`` ranks on (HPL Rmax, HPCG rate, stencil achieved FLOP/s)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clustertwin.hpc.hpcg import hpcg
from clustertwin.hpc.hpl import hpl
from clustertwin.hpc.params import DEFAULT_PARAMS, HPCParams
from clustertwin.hpc.stencil import stencil
from clustertwin.hpc.workloads import HPCGSpec, HPLSpec, StencilSpec, WorkloadSpec
from clustertwin.specs import ClusterSpec


@dataclass(frozen=True)
class WorkloadResult:
    """A workload's prediction with its headline FP64 rate and power."""

    kind: str
    tflops: float
    """FP64 work rate, TFLOP/s (HPL: Rmax; HPCG: HPCG rate; stencil: FLOPs per step / step time)."""
    power_kw: float
    time_s: float
    """HPL run time, one HPCG CG iteration, or the stencil's whole run."""
    detail: Any

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "tflops": self.tflops, "power_kw": self.power_kw, "time_s": self.time_s,
                "gflops_per_w": self.tflops / self.power_kw,
                **{k: v for k, v in self.detail.to_dict().items() if k != "workload"}}


def run(cluster: ClusterSpec, workload: WorkloadSpec, params: HPCParams = DEFAULT_PARAMS) -> WorkloadResult:
    """Evaluate ``workload`` on ``cluster``."""
    if isinstance(workload, HPLSpec):
        r = hpl(cluster, workload, params)
        return WorkloadResult("hpl", r.rmax_pflops * 1e3, r.power_kw, r.time_s, r)
    if isinstance(workload, HPCGSpec):
        g = hpcg(cluster, workload, params)
        return WorkloadResult("hpcg", g.gflops / 1e3, g.power_kw, g.time_per_iteration_s, g)
    assert isinstance(workload, StencilSpec)
    s = stencil(cluster, workload, params)
    return WorkloadResult("stencil", s.tflops, s.power_kw, s.time_s, s)
