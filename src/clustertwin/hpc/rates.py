"""Per-device and per-system FP64 rates and power: what HPL's DGEMM reaches, what TOP500 counts as peak.

* FP64 GEMM peak ``P`` = the tensor/matrix FP64 figure where the part has one, else the vector figure
  (:meth:`GPUSpec.gemm_peak_tflops`);
* DGEMM rate ``R = min(dgemm_efficiency x P, TDP x GF/W(process))``: compute-bound parts (B200's cut FP64,
  Hopper at 700 W) reach the BLAS fraction of peak, the others run into their power cap (AMD's matrix
  FP64 doubles the peak but not the energy per FLOP, so MI250X/MI300 HPL is power-bound);
* device power under HPL ``W = min(TDP, R / GF/W)``: a power-bound part sits at its cap;
* Rpeak = GPUs x rated FP64 (:meth:`GPUSpec.fp64_rpeak`) + host sockets x CPU FP64 peak, where the host CPU
  is a discrete socket (a CPU with its own ``tdp_w``); the CPU of a superchip or APU is inside the device.
"""

from __future__ import annotations

from dataclasses import dataclass

from clustertwin.errors import SpecError
from clustertwin.hpc.params import DEFAULT_PARAMS, HPCParams, gflops_per_w
from clustertwin.specs import GPUSpec, NodeSpec

W_PER_KW = 1000.0
TFLOPS_PER_PFLOPS = 1000.0


def fp64_gemm_peak_tflops(gpu: GPUSpec) -> float:
    """FP64 GEMM peak of one device (tensor/matrix, else vector); SpecError when the part has no FP64."""
    peak = gpu.gemm_peak_tflops("fp64")
    if not peak:
        raise SpecError(f"GPU '{gpu.id or gpu.name}' has no FP64 peak in the catalog")
    return float(peak)


@dataclass(frozen=True)
class DeviceRate:
    """HPL DGEMM rate of one device and what limits it."""

    peak_tflops: float
    compute_bound_tflops: float
    power_bound_tflops: float
    dgemm_tflops: float
    limited_by: str
    """``compute`` (BLAS fraction of peak) or ``power`` (TDP x GF/W)."""
    power_w: float
    """Device power while running DGEMM, W."""
    gflops_per_w: float


def device_rate(gpu: GPUSpec, params: HPCParams = DEFAULT_PARAMS) -> DeviceRate:
    """``R = min(dgemm_efficiency x P, TDP x GF/W)`` and ``W = min(TDP, R / GF/W)`` (module docstring)."""
    peak = fp64_gemm_peak_tflops(gpu)
    gfw = gflops_per_w(gpu.process_nm, params)
    compute = params.dgemm_efficiency * peak
    power = gpu.tdp_w * gfw / TFLOPS_PER_PFLOPS
    rate = min(compute, power)
    watts = min(gpu.tdp_w, rate * TFLOPS_PER_PFLOPS / gfw)
    return DeviceRate(peak_tflops=peak, compute_bound_tflops=compute, power_bound_tflops=power,
                      dgemm_tflops=rate, limited_by="compute" if compute <= power else "power",
                      power_w=watts, gflops_per_w=gfw)


def discrete_cpu(node: NodeSpec) -> bool:
    """The node's host CPU is a separate socket (has its own TDP), not the CPU part of a superchip/APU."""
    return node.cpu is not None and node.cpu.tdp_w is not None and node.cpus > 0


def rpeak_pflops(node: NodeSpec, nodes: int, gpus: int) -> tuple[float, dict[str, float]]:
    """TOP500-style Rpeak of ``gpus`` devices on ``nodes`` nodes: devices x rated FP64 + discrete host
    sockets x CPU FP64 peak (PFLOP/s), with the two parts."""
    rated = node.gpu.fp64_rpeak()
    if not rated:
        raise SpecError(f"GPU '{node.gpu.id or node.gpu.name}' has no FP64 peak in the catalog")
    gpu_pf = gpus * float(rated) / TFLOPS_PER_PFLOPS
    cpu_pf = 0.0
    if discrete_cpu(node) and node.cpu is not None and node.cpu.fp64_tflops:
        cpu_pf = nodes * node.cpus * node.cpu.fp64_tflops / TFLOPS_PER_PFLOPS
    return gpu_pf + cpu_pf, {"gpu_pflops": gpu_pf, "cpu_pflops": cpu_pf,
                             "rated_fp64_tflops_per_gpu": float(rated)}


def cooling(node: NodeSpec) -> str:
    """The node's cooling: as declared, else ``air`` for 8+ GPU servers (DGX/HGX boxes) and ``liquid`` for
    smaller HPC blades (Cray EX, BullSequana XH: 4 devices per node)."""
    if node.cooling != "any":
        return node.cooling
    return "air" if node.gpus >= 8 else "liquid"


def system_power_kw(node: NodeSpec, nodes: int, gpus: int, device_w: float,
                    params: HPCParams = DEFAULT_PARAMS) -> tuple[float, dict[str, float]]:
    """System power during a GPU FP64 run, kW: ``gpus x (device W + overhead fraction x TDP) + nodes x host
    sockets x CPU TDP x cpu_power_fraction``; the overhead fraction depends on :func:`cooling` (IT power, no
    facility cooling plant: what TOP500/Green500 list)."""
    gpu_kw = gpus * device_w / W_PER_KW
    frac = params.overhead_fraction_air if cooling(node) == "air" else params.overhead_fraction_liquid
    overhead_kw = gpus * frac * node.gpu.tdp_w / W_PER_KW
    cpu_kw = 0.0
    if discrete_cpu(node) and node.cpu is not None and node.cpu.tdp_w:
        cpu_kw = nodes * node.cpus * node.cpu.tdp_w * params.cpu_power_fraction / W_PER_KW
    total = gpu_kw + overhead_kw + cpu_kw
    return total, {"gpu_kw": gpu_kw, "host_cpu_kw": cpu_kw, "overhead_kw": overhead_kw, "cooling": cooling(node)}
