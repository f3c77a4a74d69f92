"""Named efficiency parameters of the training model (``TrainParams``).

Every number that is not a count or a definition lives here, with a documented default derived from
public measurements (and refined against the calibration set of docs/train.md). A
``Calibration(train={...})`` overrides fields by name; unknown names raise ``SpecError`` with the
nearest valid name.
"""

from __future__ import annotations

import math
from dataclasses import fields, replace

from pydantic import ConfigDict
from pydantic.dataclasses import dataclass

from clustertwin.errors import SpecError, did_you_mean
from clustertwin.specs.calibration import SECTION_CHECKS, Calibration
from clustertwin.specs.hardware import FP8_GEMM_EFFICIENCY_RATIO

#: parameters that may be infinite (``te_stack_min_year = inf`` selects the legacy stack for every GPU)
_MAY_BE_INFINITE = frozenset({"te_stack_min_year"})


MIN_EFFICIENCY = 1e-3
"""Lowest value of any efficiency (and of a product of factors that forms one, :data:`PRODUCTS`): the slowest
published figures of these kernels are ~10% of peak (unfused attention, small GEMMs); 0.1% describes another
device or a broken measurement (wrong peak, clocks at idle), and below it the step time only extrapolates
(``hbm_efficiency`` 1e-300 gave a 6.7e300-second step). CPU-host GEMMs against an all-core peak still clear it."""

#: parameters whose range is not the kind rule of :func:`bound_problem`: (low, high, what the value is); each
#: range is justified in the parameter's docstring
RANGES: dict[str, tuple[float, float, str]] = {
    "moe_imbalance": (1.0, math.inf, "is a load-imbalance factor (busiest EP rank's tokens over the mean)"),
    "rank_jitter_cv": (0.0, 0.2, "is a relative standard deviation of GPU speed"),
    "hbm_efficiency": (0.01, 1.0, "is an efficiency (fraction of the HBM bandwidth)"),
}

#: products of parameters that together form one kernel's fraction of a peak (so each product must be <= 1)
PRODUCTS: tuple[tuple[tuple[str, str], str], ...] = (
    (("gemm_efficiency", "fp8_gemm_efficiency_ratio"), "an FP8 GEMM's fraction of the FP8 peak"),
    (("attention_efficiency", "attention_fa3_ratio"), "a FlashAttention-3 class kernel's fraction of the 16-bit peak"),
)


def bound_problem(name: str, value: float) -> str | None:
    """Why ``value`` is not a valid ``name``, or None. :data:`RANGES` first; else by the parameter's kind:
    efficiencies (``*_efficiency``) lie in [:data:`MIN_EFFICIENCY`, 1] (a fraction of a peak, never above
    it); overlaps and fractions (``*_overlap``, ``memory_fragmentation``) in [0, 1]; every other parameter
    (latencies, overheads, half-points, ratios, GiB) is >= 0 (ratios > 0); all are finite."""
    v = float(value)
    if math.isnan(v) or (math.isinf(v) and name not in _MAY_BE_INFINITE):
        return f"must be a finite number (got {value!r})"
    if name in RANGES:
        lo, hi, what = RANGES[name]
        want = f"value >= {lo:g}" if math.isinf(hi) else f"{lo:g} <= value <= {hi:g}"
        return None if lo <= v <= hi else f"{what}, expected {want} (got {v:g})"
    if name.endswith("_efficiency"):
        return None if MIN_EFFICIENCY <= v <= 1 else \
            f"is an efficiency, expected 0 < value <= 1 (at least {MIN_EFFICIENCY:g}; got {v:g})"
    if name.endswith("_overlap") or name == "memory_fragmentation":
        return None if 0 <= v <= 1 else f"is a fraction, expected 0 <= value <= 1 (got {v:g})"
    if name.endswith("_ratio"):
        return None if v > 0 else f"is a ratio, expected > 0 (got {v:g})"
    return None if v >= 0 else f"must be >= 0 (got {v:g})"


def product_problem(values: dict[str, float]) -> tuple[tuple[str, str], str] | None:
    """The first :data:`PRODUCTS` pair whose product lies outside [:data:`MIN_EFFICIENCY`, 1], with why; None
    when all do. ``values`` holds every parameter (defaults and overrides)."""
    for (a, b), what in PRODUCTS:
        x = float(values[a]) * float(values[b])
        if not MIN_EFFICIENCY <= x <= 1:
            return (a, b), (f"{a} {float(values[a]):g} x {b} {float(values[b]):g} = {x:.4g} is {what}, expected "
                            f"{MIN_EFFICIENCY:g} <= product <= 1")
    return None


@dataclass(frozen=True, config=ConfigDict(allow_inf_nan=True))  # bounds per kind: see bound_problem
class TrainParams:
    """Efficiency, overhead and overlap parameters of the step-time and memory models."""

    gemm_efficiency: float = 0.93
    """Fraction of the dense tensor peak at which the tensor cores issue in a large GEMM of a training step,
    before the tile traffic (``gemm_tile_bytes_per_flop``) and the shape roll-offs; together they put large
    16-bit GEMMs at ~0.77 of peak on A100 and ~0.67 on H100 (cuBLAS measurements: 0.8-0.9 and 0.7-0.75)."""
    gemm_kernel_efficiency: float = 0.97
    """The same fraction for a lone kernel in the tiled model (``Hardware.tiled_gemm``), before the tiles'
    HBM traffic (``gemm_kernel_tile_bytes_per_flop``) and the shape terms of :mod:`clustertwin.train.gemm`
    (tile waves, prologue, operand reuse): together they put a large 16-bit kernel at ~0.75 of peak on H100
    SXM (validation/gemm.yaml: 25,000 x 768-3,072 x 768-3,072 GEMMs at 0.72-0.75 of 989 TFLOP/s in real
    profiler traces) and ~0.85 on A100 (cuBLAS measurements quote 0.8-0.9). Fitted on validation/gemm.yaml."""
    fp8_gemm_efficiency_ratio: float = FP8_GEMM_EFFICIENCY_RATIO
    """FP8 GEMM efficiency relative to 16-bit at equal shape (:data:`FP8_GEMM_EFFICIENCY_RATIO`, shared
    with the inference model)."""
    gemm_k_half: float = 150.0
    """Reduction depth k at which a training GEMM's efficiency halves (tile prologue/epilogue amortised over
    k): efficiency x k / (k + gemm_k_half); the fused attention kernels' head-width factor uses it too
    (:func:`clustertwin.train.attention.head_dim_factor`: head_dim 64 at 0.65 of the head_dim-128 rate)."""
    gemm_tiles_half: float = 22.0
    """Output tiles (128 x 128) at which a training GEMM reaches half its large-GEMM efficiency: a GPU runs
    about one tile per SM per wave (108 on A100, 132 on H100), so small outputs leave SMs idle; split-K and
    stream-K kernels recover part of it. Efficiency x tiles / (tiles + gemm_tiles_half)."""
    gemm_tile_k0: float = 64.0
    """A GEMM tile's prologue and epilogue (accumulator set-up, output conversion and store) expressed as
    reduction depth: a tile of depth k runs at k / (k + gemm_tile_k0) of the rate. Fitted on
    validation/gemm.yaml."""
    gemm_tile_bytes_per_flop: float = 1.2e-3
    """HBM bytes a tiled training GEMM moves per FLOP (16-bit operands): a 256 x 128 tile re-reads 0.0117
    B/FLOP from L2; with ~90% L2 hits 1.2e-3 B/FLOP reach HBM. The GEMM time adds this traffic at HBM speed,
    so GPUs with a higher FLOP-to-bandwidth ratio (H100: 295 FLOP/B vs A100: 153) sustain a smaller fraction
    of their peak."""
    gemm_kernel_tile_bytes_per_flop: float = 0.9e-3
    """The same L2-miss traffic in the tiled kernel model, beyond the kernel's compulsory operand traffic.
    Fitted on validation/gemm.yaml with the A100/H100 ratio of the cuBLAS figures (~0.85 / ~0.75)."""
    gemm_tile_prologue_s: float = 0.05e-6
    """Pipeline fill of one output tile, seconds: the first operand loads from HBM/L2 (~0.5-0.8 us memory
    latency, partly hidden by the other resident tile of the SM) before its first MMA; it dominates batched
    GEMMs of tiny matrices (thousands of 8 x 64 tiles). Fitted on validation/gemm.yaml."""
    gemm_tile_reuse: float = 44.0
    """Operand reuse Tm Tn / (Tm + Tn) (MACs per element loaded into shared memory) a tile needs to keep
    the tensor cores fed: 128 x 128 tiles (64) and 128 x 256 (85) run at the full rate, 64 x 64 (32) at
    32 / gemm_tile_reuse of it, skinny 64 x 16 tiles (12.8) far below. Fitted on validation/gemm.yaml."""
    gemm_unaligned_efficiency: float = 0.38
    """Rate of a GEMM whose leading dimension (n or k in row-major) is not a multiple of 8 elements
    (16 bytes) relative to an aligned one: no TMA or 128-bit vector loads, so operands move in narrower
    loads (odd sequence lengths of 3,137 or 5,185 tokens, an unpadded 30,522-token vocabulary). Fitted on
    validation/gemm.yaml, where those GEMMs run 2-3.7x below their memory roofline on H100 and MI300X."""
    kernel_latency_s: float = 4e-6
    """Fixed GPU time per kernel (launch ramp and wave tail), seconds: the shortest GEMM kernels of
    validation/gemm.yaml run 4.7-6 us."""
    hbm_efficiency: float = 0.87
    """Fraction of peak HBM bandwidth reached by streaming element-wise kernels (norms, activations,
    dropout, softmax, optimizer); STREAM-like copies reach 85-92% on A100/H100. Range [0.01, 1]: below 1% a
    device stream runs slower than the host link (H100 3.35 TB/s x 1% = 34 GB/s against PCIe Gen5 x16's 63;
    A100 1.6 TB/s x 1% = 16 GB/s against Gen4's 32), so the figure measures something else (pageable host
    copies, idle clocks)."""
    attention_efficiency: float = 0.25
    """Fraction of the 16-bit peak reached by fused (flash) attention kernels over forward and
    backward on the Transformer-Engine stack (FlashAttention-2 class kernels on H100: ~35% forward, less
    backward; Shah et al. 2024 report FlashAttention-3 at 60-75%)."""
    attention_fa3_ratio: float = 1.5
    """Fused-attention rate of FlashAttention-3 / cuDNN-9 class kernels (stacks with
    ``fused_attention_gen = 3``) relative to ``attention_efficiency``: Shah et al. 2024 (FlashAttention-3,
    Fig. 5-6, H100 BF16, head_dim 128) measure 1.5-2.0x FlashAttention-2 in the forward and 1.5-1.75x in
    the backward at long sequences, less at 2-4K tokens."""
    te_stack_min_year: float = 2022.0
    """GPUs released in or after this year are modelled with the software stack their published runs use
    (Megatron-Core + Transformer Engine: fused flash attention, TP communication overlapped with GEMMs
    at ``tp_comm_overlap``); older GPUs with the Megatron-LM / Megatron-DeepSpeed stack of their runs
    (unfused attention over materialised s x s scores with fused scale-mask-softmax and dropout, no TP
    overlap). 0: always the Transformer-Engine stack."""
    kernel_host_overhead_s: float = 45e-6
    """Host (Python/framework/launch) time per GPU kernel, seconds. The GPU idles when a layer's kernels
    run shorter than their dispatch: layer time = max(host time, GPU time). vTrain's Megatron-DeepSpeed
    runs show a floor of ~3.5 ms per layer and micro-batch (~80 kernels with full recompute)."""
    tp_comm_overlap: float = 0.6
    """Fraction of tensor-parallel communication hidden behind GEMMs (Transformer Engine userbuffer
    overlap; applies to the Transformer-Engine stack, see ``te_stack_min_year``)."""
    overlap_interference: float = 0.25
    """Seconds of slower compute per second of data-parallel communication hidden behind it: an
    overlapped NCCL collective runs one thread block per channel (up to 32 channels, about a quarter of
    the SMs of an H100 or A100) and takes HBM bandwidth from the GEMMs it overlaps."""
    zero3_overlap: float = 0.9
    """Fraction of ZeRO-3/FSDP parameter gathers hidden by prefetching behind compute."""
    cp_overlap: float = 0.8
    """Fraction of ring-attention KV exchange hidden behind attention compute."""
    moe_a2a_overlap: float = 0.8
    """Fraction of a layer's compute under which 1F1B all-to-all overlap / DualPipe can hide the MoE
    dispatch and combine (the rest of the compute depends on them)."""
    grouped_gemm_efficiency: float = 0.85
    """Grouped expert GEMM efficiency relative to a dense GEMM of the same total shape (per-expert tile
    scheduling, ragged problem sizes)."""
    moe_m_half: float = 128.0
    """Rows per expert at which a grouped GEMM's per-expert efficiency halves (row padding to 128-row
    tiles, per-expert prologue): factor 1 + moe_m_half / rows."""
    moe_sync_latency_s: float = 30e-6
    """Device-to-host copy and stream synchronisation of the MoE dispatcher's token counts, seconds per
    dispatch (:func:`clustertwin.train.moe.sync_stall`)."""
    moe_sync_host_s: float = 1e-3
    """Host (Python) seconds of an MoE layer's forward after the dispatcher's token-count sync besides its
    kernel launches: the eager-mode token bookkeeping of Megatron-Core's dispatcher (split sizes to a
    Python list, permutation indices, probabilities, ~60 small torch ops at 10-20 us each); backward
    twice. The GPU idles for the part the expert GEMMs do not cover (:func:`clustertwin.train.moe.sync_stall`).
    Fitted once over the MoE calibration rows (any value in 0.6-1.2 ms gives the same median)."""
    moe_imbalance: float = 1.1
    """Dropless routing without forced balance: routed tokens of the busiest EP rank over the mean (the
    step waits for it); a capacity factor caps it. At least 1: the busiest rank carries at least the mean
    (below 1 every rank would get fewer tokens than the average, and 0 no work); physically at most the EP
    degree (every token on one rank), which a layout, not the parameter, fixes."""
    pp_overlap: float = 0.5
    """Fraction of pipeline send/recv hidden behind compute of the other micro-batches."""
    rank_jitter_cv: float = 0.025
    """Standard deviation of a GPU's step time relative to the mean (same-SKU speed variation: Sinha et
    al. 2022 measured an 8% average and 22% maximum range across the GPUs of a cluster, about 8 standard
    deviations over thousands of GPUs: 1-2.8%); the step waits for the slowest GPU
    (:mod:`clustertwin.train.stragglers`). 2.5%, fitted once to the calibration set within that range.
    Range [0, 0.2]: per-GPU time ``t (1 + cv Z)`` turns negative beyond Z = -1/cv, a 5-sigma event at 0.2
    (one GPU in ~3.5 million), so the normal model holds up to the largest clusters only below it; 0.2 is
    7x the largest measured spread (2.8%)."""
    memory_reserved_gib: float = 3.0
    """Per-GPU memory the framework holds besides the model: CUDA context (~0.5 GiB), NCCL channel
    buffers and cuBLAS/cuDNN workspaces (~2.5 GiB), GiB."""
    memory_fragmentation: float = 0.05
    """Caching-allocator fragmentation as a fraction of activation memory (PyTorch expandable segments
    keep it to a few per cent); with PyTorch-native stacks (FSDP2) of every per-step allocation:
    activations, loss buffers and unsharded parameter/gradient buffers (:mod:`clustertwin.train.memory`)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            problem = bound_problem(f.name, getattr(self, f.name))
            if problem:
                raise ValueError(f"training parameter {f.name} {problem}")
        both = product_problem({f.name: getattr(self, f.name) for f in fields(self)})
        if both:
            raise ValueError(f"training parameters {both[1]}")

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def with_overrides(self, overrides: dict[str, float] | None) -> TrainParams:
        """A copy with fields replaced; unknown names raise SpecError naming the nearest field."""
        if not overrides:
            return self
        valid = self.names()
        for k in overrides:
            if k not in valid:
                raise SpecError(f"unknown training parameter '{k}'{did_you_mean(k, valid)}",
                                path=("train", k))
            problem = bound_problem(k, overrides[k])
            if problem:
                raise SpecError(problem, path=("train", k))
        both = product_problem({**{n: getattr(self, n) for n in valid}, **overrides})
        if both:
            raise SpecError(both[1], path=("train",))
        return replace(self, **{k: float(v) for k, v in overrides.items()})


DEFAULT_PARAMS = TrainParams()
SECTION_CHECKS['train'] = DEFAULT_PARAMS.with_overrides  # range and name checks of a calibration section

#: ``ParallelismSpec.software_stack`` -> the ``te_stack_min_year`` that selects it for every GPU
STACK_MIN_YEAR: dict[str, float] = {"te": 0.0, "legacy": math.inf}


def params_for_stack(params: TrainParams, software_stack: str = "auto") -> TrainParams:
    """Parameters with the software stack forced (``te``/``legacy``); ``auto`` keeps the GPU-generation
    rule of ``te_stack_min_year``."""
    if software_stack == "auto":
        return params
    if software_stack not in STACK_MIN_YEAR:
        raise SpecError(f"unknown software stack '{software_stack}'{did_you_mean(software_stack, STACK_MIN_YEAR)}"
                        " (expected auto, te or legacy)", path=("software_stack",))
    return replace(params, te_stack_min_year=STACK_MIN_YEAR[software_stack])


def resolve_params(params: TrainParams | None = None, calibration: Calibration | None = None) -> TrainParams:
    """Parameters to use: ``params`` (or defaults) with ``calibration.train`` overrides applied."""
    base = params or DEFAULT_PARAMS
    if calibration is not None:
        base = base.with_overrides(calibration.train)
    return base
