"""Per-GPU rates of the cluster's accelerator that the training model uses (peaks, HBM, stack)."""

from __future__ import annotations

from dataclasses import dataclass

from clustertwin.errors import SpecError
from clustertwin.specs.cluster import ClusterSpec
from clustertwin.specs.hardware import GPUSpec
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
    attention_gen: int = 2
    """generation of the fused attention kernels (the stack's ``fused_attention_gen``)"""
    sm_count: int | None = None
    """SMs/CUs of the GPU (``GPUSpec.sm_count``): the waves of GEMM output tiles (:mod:`clustertwin.train.gemm`)."""
    gemm_efficiency_ratio: float = 1.0
    """The GPU's sustained large-GEMM rate relative to the ``gemm_efficiency`` reference (``GPUSpec``)."""
    tiled_gemm: bool = False
    """Time GEMMs with the tiled kernel model (:func:`kernel_hardware`, lone kernels); False: the training
    step's calibrated roll-offs (:class:`clustertwin.train.gemm.Gemm`)."""
    value_bytes: int = 2
    """Bytes per stored activation/gradient value: 4 for FP32/TF32 training (TF32 is a GEMM mode on FP32
    tensors), 2 for 16-bit and FP8 (mixed precision keeps 16-bit activations)."""


#: precisions trained without 16-bit tensors: every value stored in FP32
FULL_PRECISION = ("fp32", "tf32")


def value_bytes(precision: str) -> int:
    """Bytes per activation/gradient value at a training precision (4 for FP32/TF32, else 2)."""
    return 4 if precision.lower() in FULL_PRECISION else 2


#: architectures that the FlashAttention-3 class kernels target (warpgroup MMA + TMA, sm90; Shah et al. 2024)
FA3_ARCHS = frozenset({"hopper"})


def attention_generation(stack: Stack, arch: str) -> int:
    """Fused-attention kernel generation a stack runs on a GPU: the stack's ``fused_attention_gen``, but
    FlashAttention-3 class kernels (3) only on the architectures they were written and measured for
    (:data:`FA3_ARCHS`); elsewhere FlashAttention-2 class (2)."""
    gen = stack.fused_attention_gen
    return gen if gen < 3 or arch.lower() in FA3_ARCHS else 2


def gemm_peaks(gpu: GPUSpec, precision: str) -> tuple[float, float]:
    """(GEMM peak at ``precision``, 16-bit peak) of a GPU in TFLOP/s; SpecError if it lacks that precision.

    The GEMM peak is ``GPUSpec.gemm_peak_tflops(precision)`` (FP32: the larger of the vector and the
    matrix/packed FP32 rate; TF32: the dense TF32 tensor rate); FP32/TF32 runs its 16-bit work (attention)
    at that same peak."""
    name = gpu.id or gpu.name
    peak = gpu.gemm_peak_tflops(precision)
    if not peak:
        have = [p for p in ("fp8", "bf16", "fp16", "tf32", "fp32") if gpu.gemm_peak_tflops(p)]
        raise SpecError(f"GPU '{name}' has no {precision} peak in the catalog; it trains in "
                        f"{', '.join(have) or 'no catalogued precision'} (--precision)", path=("precision",))
    full = precision.lower() in FULL_PRECISION
    return peak, (peak if full else (gpu.peak_tflops("bf16") or gpu.peak_tflops("fp16") or peak))


def kernel_hardware(gpu: GPUSpec, precision: str) -> Hardware:
    """The rates of one GPU running a lone kernel at ``precision`` (no stack, no node): what the ``gemm``
    validation kind times with :class:`~clustertwin.train.gemm.Gemm`."""
    peak, p16 = gemm_peaks(gpu, precision)
    return Hardware(peak_flops=peak * TFLOP, peak16_flops=p16 * TFLOP, hbm_bytes_per_s=gpu.hbm_gb_per_s * GB,
                    hbm_bytes=gpu.hbm_gb * GIB, flash=False, gpus_per_node=1, value_bytes=value_bytes(precision),
                    sm_count=gpu.sm_count, gemm_efficiency_ratio=gpu.gemm_efficiency_ratio, tiled_gemm=True)


def hardware(cluster: ClusterSpec, precision: str, params: TrainParams, stack: Stack | None = None) -> Hardware:
    """Peak rates of the cluster's GPU for ``precision`` (:func:`gemm_peaks`) and the kernels of ``stack``
    (default: by GPU generation); SpecError if the GPU lacks that precision. FP32/TF32 training runs
    without fused flash attention (FlashAttention kernels take FP16/BF16 inputs only, Dao et al. 2022) and
    stores 4-byte values (:func:`value_bytes`)."""
    gpu = cluster.node.gpu
    peak, p16 = gemm_peaks(gpu, precision)
    full = precision.lower() in FULL_PRECISION
    st = stack or resolve_stack("auto", cluster, params)
    return Hardware(peak_flops=peak * TFLOP, peak16_flops=p16 * TFLOP, hbm_bytes_per_s=gpu.hbm_gb_per_s * GB,
                    hbm_bytes=gpu.hbm_gb * GIB, flash=st.flash_attention and not full,
                    gpus_per_node=cluster.node.gpus, tp_overlap=st.tp_comm_overlap,
                    attention_gen=attention_generation(st, gpu.arch), value_bytes=value_bytes(precision),
                    sm_count=gpu.sm_count, gemm_efficiency_ratio=gpu.gemm_efficiency_ratio)
