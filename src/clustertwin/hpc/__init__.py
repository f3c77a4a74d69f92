"""Science computing on the cluster: HPL, HPCG and halo-exchange stencils (FP64), each a pure function of a
cluster spec and a workload spec with a breakdown; TOP500/Green500 validation (kind ``hpl``) and the
FP64-work-per-dollar comparison of ``clustertwin hpc compare``."""

from clustertwin.hpc.hpl import HPLResult, hpl
from clustertwin.hpc.params import DEFAULT_PARAMS, HPCParams
from clustertwin.hpc.workloads import HPCGSpec, HPLSpec, StencilSpec, WorkloadSpec, load_workload

__all__ = ["DEFAULT_PARAMS", "HPCGSpec", "HPCParams", "HPLResult", "HPLSpec", "StencilSpec", "WorkloadSpec",
           "hpl", "load_workload"]
