"""Per-GPU rates of the cluster's accelerator that the training model uses (peaks, HBM, stack)."""

from __future__ import annotations

from dataclasses import dataclass

from clustertwin.errors import SpecError
from clustertwin.specs.cluster import ClusterSpec
from clustertwin.train.params import TrainParams
from clustertwin.units import GB, TFLOP


@dataclass(frozen=True)
class Hardware:
    """Per-GPU rates the model uses."""

    peak_flops: float
    """Dense peak at the GEMM precision, FLOP/s."""
    peak16_flops: float
    """Dense 16-bit peak (attention kernels), FLOP/s."""
    hbm_bytes_per_s: float
    hbm_bytes: float
    flash: bool
    """Transformer-Engine stack (flash attention, TP overlap); see ``TrainParams.te_stack_min_year``."""
    gpus_per_node: int


def hardware(cluster: ClusterSpec, precision: str, params: TrainParams) -> Hardware:
    """Peak rates of the cluster's GPU for ``precision``; SpecError if the GPU lacks that precision."""
    gpu = cluster.node.gpu
    peak = gpu.peak_tflops(precision)
    if not peak:
        raise SpecError(f"GPU '{gpu.id or gpu.name}' has no {precision} tensor peak", path=("precision",))
    p16 = gpu.peak_tflops("bf16") or gpu.peak_tflops("fp16") or peak
    year = gpu.release_year
    flash = year is None or year >= params.te_stack_min_year
    return Hardware(peak_flops=peak * TFLOP, peak16_flops=p16 * TFLOP, hbm_bytes_per_s=gpu.hbm_gb_per_s * GB,
                    hbm_bytes=gpu.hbm_bytes, flash=flash, gpus_per_node=cluster.node.gpus)
