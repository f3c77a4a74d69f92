"""Per-GPU rates of the cluster's accelerator that the training model uses (peaks, HBM, stack)."""

from __future__ import annotations

from dataclasses import dataclass

from clustertwin.errors import SpecError
from clustertwin.specs.cluster import ClusterSpec
from clustertwin.train.params import TrainParams
from clustertwin.train.stack import Stack, resolve_stack
from clustertwin.units import GB, GIB, TFLOP


@dataclass(frozen=True)
class Hardware:
    """Per-GPU rates the model uses."""

    peak_flops: float
    """Dense peak at the GEMM precision, FLOP/s."""
    peak16_flops: float
    """Dense 16-bit peak (attention kernels), FLOP/s."""
    hbm_bytes_per_s: float
    hbm_bytes: float
    """HBM capacity: GPU memory sizes are binary (an "80 GB" H100 or A100 holds 80 GiB; nvidia-smi reports
    81,559 MiB on H100 SXM 80GB and 81,920 MiB on A100 80GB), so ``hbm_gb`` x 2^30 bytes."""
    flash: bool
    """fused flash attention (the stack's ``flash_attention``)"""
    gpus_per_node: int
    tp_overlap: bool = False
    """TP communication overlapped with GEMMs (the stack's ``tp_comm_overlap``)"""


def hardware(cluster: ClusterSpec, precision: str, params: TrainParams, stack: Stack | None = None) -> Hardware:
    """Peak rates of the cluster's GPU for ``precision`` and the kernels of ``stack`` (default: by GPU
    generation); SpecError if the GPU lacks that precision."""
    gpu = cluster.node.gpu
    peak = gpu.peak_tflops(precision)
    if not peak:
        raise SpecError(f"GPU '{gpu.id or gpu.name}' has no {precision} tensor peak", path=("precision",))
    p16 = gpu.peak_tflops("bf16") or gpu.peak_tflops("fp16") or peak
    st = stack or resolve_stack("auto", cluster, params)
    return Hardware(peak_flops=peak * TFLOP, peak16_flops=p16 * TFLOP, hbm_bytes_per_s=gpu.hbm_gb_per_s * GB,
                    hbm_bytes=gpu.hbm_gb * GIB, flash=st.flash_attention, gpus_per_node=cluster.node.gpus,
                    tp_overlap=st.tp_comm_overlap)
